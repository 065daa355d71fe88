import { useEffect, useLayoutEffect, useMemo, useRef, useState, type InputHTMLAttributes } from 'react';
import { useLocation, useNavigate, useSearchParams } from 'react-router';
import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import { isActive } from '../../api/runStatus';
import type { SampleComparisonQuery } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { runColor } from './colors';
import { toSearch } from './params';
import { PromptAcross, runLabel, type DiffPicks, type Picked } from './PromptAcross';
import { SampleDiff } from './SampleDiff';
import { DEFAULT_LIMIT, hasFilters, MAX_LIMIT, MAX_RUNS, parseSamplesState, samplesQuery, type SampleAt, type SamplesState } from './samplesParams';
import type { ComparedRun } from './useCompareData';
import './compareSamples.css';

const REFRESH_MS = 10_000;

/** Every compared run's samples in one request, polled while any of them may still log. */
function useSampleComparison(query: SampleComparisonQuery | null, poll: boolean) {
  return useQuery({
    queryKey: queryKeys.compare.samples(query),
    enabled: query != null,
    placeholderData: keepPreviousData,
    queryFn: () => unwrap(api.GET('/api/v1/samples', { params: { query: query! } })),
    refetchInterval: poll ? REFRESH_MS : false,
  });
}

type DraftProps = { value: string; onCommit: (value: string) => void } & Omit<InputHTMLAttributes<HTMLInputElement>, 'value' | 'onChange'>;

/** A text field that changes the URL (and so the request) on Enter, on leaving it, or after a pause in typing, not per key. */
function DraftInput({ value, onCommit, ...rest }: DraftProps) {
  const [draft, setDraft] = useState(value);
  const [shown, setShown] = useState(value);
  if (value !== shown) {
    setShown(value);
    setDraft(value);
  }
  const commitRef = useRef(onCommit);
  useLayoutEffect(() => {
    commitRef.current = onCommit;
  });
  const commit = () => {
    if (draft !== value) commitRef.current(draft);
  };
  useEffect(() => {
    if (draft === value) return;
    const timer = setTimeout(() => commitRef.current(draft), 700);
    return () => clearTimeout(timer);
  }, [draft, value]);
  return (
    <input
      {...rest}
      value={draft}
      onChange={(e) => setDraft(e.target.value)}
      onBlur={commit}
      onKeyDown={(e) => {
        if (e.key === 'Enter') {
          e.preventDefault();
          commit();
        }
      }}
    />
  );
}

interface ControlsProps {
  state: SamplesState;
  following: boolean;
  steps: readonly number[];
  onChange: (changes: Record<string, string | null>) => void;
}

function Controls({ state, following, steps, onChange }: ControlsProps) {
  const at = (value: SampleAt) => onChange({ at: value === 'latest' ? null : value });
  return (
    <form className="cmp-controls" onSubmit={(e) => e.preventDefault()} aria-label="Which samples">
      <fieldset className="cmp-at" disabled={following} data-testid="samples-at">
        <legend>Each run at</legend>
        <label className="check">
          <input type="radio" name="cmp-at" value="latest" checked={state.at === 'latest'} onChange={() => at('latest')} />
          Latest
        </label>
        <span className="cmp-group">
          <label className="check">
            <input type="radio" name="cmp-at" value="step" checked={state.at === 'step'} onChange={() => at('step')} />
            At step
          </label>
          <DraftInput
            aria-label="Step"
            type="number"
            min={0}
            className="cmp-step-input"
            list="cmp-sample-steps"
            value={state.step == null ? '' : String(state.step)}
            onCommit={(v) => onChange(v.trim() ? { step: v.trim(), at: 'step' } : { step: null })}
          />
          <datalist id="cmp-sample-steps">
            {steps.map((s) => (
              <option key={s} value={s} />
            ))}
          </datalist>
        </span>
        <span className="cmp-group">
          <label className="check">
            <input type="radio" name="cmp-at" value="best" checked={state.at === 'best'} onChange={() => at('best')} />
            Best checkpoint by
          </label>
          <DraftInput
            aria-label="Metric"
            placeholder="eval/accuracy"
            size={14}
            value={state.metric}
            onCommit={(v) => onChange(v.trim() ? { metric: v.trim(), at: 'best' } : { metric: null })}
          />
          <select aria-label="Best is" value={state.mode} onChange={(e) => onChange({ mode: e.target.value === 'min' ? 'min' : null })}>
            <option value="max">max</option>
            <option value="min">min</option>
          </select>
        </span>
      </fieldset>
      <fieldset className="cmp-filters" data-testid="samples-filters">
        <legend>Only answers</legend>
        <span className="cmp-group">
          <label htmlFor="cmp-reward-below">with reward below</label>
          <DraftInput
            id="cmp-reward-below"
            type="number"
            step="any"
            className="cmp-number"
            value={state.rewardBelow == null ? '' : String(state.rewardBelow)}
            onCommit={(v) => onChange({ reward_below: v.trim() && Number.isFinite(Number(v)) ? v.trim() : null })}
          />
        </span>
        <label className="check">
          <input type="checkbox" checked={state.truncated} onChange={(e) => onChange({ truncated: e.target.checked ? '1' : null })} />
          truncated
        </label>
        <span className="cmp-group">
          <label htmlFor="cmp-failed" title="A score the answer got 0 or less on, by its full name">
            failing
          </label>
          <DraftInput
            id="cmp-failed"
            placeholder="reward/format"
            size={14}
            value={state.failed}
            onCommit={(v) => onChange({ failed: v.trim() || null })}
          />
        </span>
      </fieldset>
    </form>
  );
}

/** Compare's Samples view: the same prompts side by side, a column per run, each run at the step the controls pick. */
export function CompareSamples({ runs }: { runs: readonly ComparedRun[] }) {
  const [params] = useSearchParams();
  const location = useLocation();
  const navigate = useNavigate();
  const state = parseSamplesState(params);
  const following = state.at === 'all';

  // Ask only once every run has answered, and only for runs that exist and may be read: the API refuses the whole
  // request for one it cannot read, and the legend already says why that one is missing.
  const settled = runs.every((r) => r.run != null || r.error != null);
  const readable = runs.filter((r) => r.run != null).map((r) => r.id);
  const planned = settled ? samplesQuery(readable, state) : null;
  const query = planned && 'query' in planned ? planned.query : null;
  const poll = runs.some((r) => r.run != null && isActive(r.run.status));
  const result = useSampleComparison(query, poll);
  const data = query ? result.data : undefined;
  const busy = query != null && (result.isPlaceholderData || result.isPending);

  const colors = useMemo(() => new Map(runs.map((r, i) => [r.id, runColor(i)])), [runs]);
  const steps = useMemo(() => [...new Set(data?.runs.flatMap((r) => r.steps) ?? [])].sort((a, b) => a - b), [data]);

  const [picked, setPicked] = useState<Picked[]>([]);
  const picks: DiffPicks = {
    picked,
    toggle: (pick) =>
      setPicked((now) => (now.some((p) => p.key === pick.key) ? now.filter((p) => p.key !== pick.key) : now.length >= 2 ? now : [...now, pick])),
  };

  const change = (changes: Record<string, string | null>) => {
    const next = new URLSearchParams(params);
    for (const [name, value] of Object.entries(changes)) {
      if (value == null || value === '') next.delete(name);
      else next.set(name, value);
    }
    navigate({ search: toSearch(next) }, { replace: true });
  };
  // Following pushes a history entry (the browser's Back leaves it too) and remembers which view it left.
  const follow = (hash: string) => {
    const next = new URLSearchParams(params);
    next.set('at', 'all');
    next.set('prompt_hash', hash);
    navigate({ search: toSearch(next) }, { state: { samplesFrom: state.at } });
  };
  const back = () => {
    const from = (location.state as { samplesFrom?: SampleAt } | null)?.samplesFrom;
    const next = new URLSearchParams(params);
    next.delete('prompt_hash');
    if (from === 'step' || from === 'best') next.set('at', from);
    else next.delete('at');
    navigate({ search: toSearch(next) });
  };

  const filtered = hasFilters(state);
  const shown = data?.prompts ?? [];
  return (
    <div className="compare-samples" data-testid="compare-samples" data-at={state.at} aria-busy={busy}>
      <Controls state={state} following={following} steps={steps} onChange={change} />
      {following && (
        <p className="cmp-following" data-testid="samples-following">
          <button type="button" data-testid="samples-back" onClick={back}>
            ‹ Back
          </button>{' '}
          Following one prompt: each run's answers to it at every step with samples.
        </p>
      )}
      {!following && state.promptHash && (
        <p className="cmp-following">
          Only prompt <code>{state.promptHash}</code>.{' '}
          <button type="button" className="linklike" onClick={back}>
            Show all prompts
          </button>
        </p>
      )}
      {readable.length > MAX_RUNS && <p className="muted">Samples compare the first {MAX_RUNS} runs.</p>}
      {!settled && <p className="muted">Loading runs…</p>}
      {planned && 'missing' in planned && <p className="compare-hint">{planned.missing}</p>}
      <ErrorNote error={query ? result.error : null} />
      {data && (
        <ul className="cmp-shown" aria-label="Shown steps">
          {data.runs.map((r) => (
            <li key={r.run_id} data-run={r.run_id} data-step={r.step ?? undefined}>
              <span className="swatch" style={{ background: colors.get(r.run_id) }} aria-hidden="true" />
              {runLabel(r)}
              {r.step != null ? (
                <span className="muted"> step {r.step}</span>
              ) : r.why ? (
                <span className="muted cmp-why"> {r.why}</span>
              ) : (
                <span className="muted"> {r.steps.length} steps with samples</span>
              )}
            </li>
          ))}
        </ul>
      )}
      {data && shown.length === 0 && (
        <p className="muted" data-testid="samples-empty">
          {data.runs.every((r) => r.step == null && r.why)
            ? 'None of these runs has samples to show here.'
            : filtered
              ? 'No answers match these filters.'
              : 'No samples to show.'}
        </p>
      )}
      <div className="cmp-prompts">
        {data &&
          shown.map((p) => (
            <PromptAcross
              key={p.prompt_hash}
              prompt={p}
              runs={data.runs}
              colors={colors}
              following={following}
              filtered={filtered}
              onFollow={follow}
              picks={picks}
            />
          ))}
      </div>
      {data && data.count > shown.length && (
        <p className="muted">
          Showing {shown.length} of {data.count} prompts.{' '}
          {state.limit < MAX_LIMIT && (
            <button type="button" className="linklike" onClick={() => change({ limit: String(Math.min(MAX_LIMIT, state.limit + DEFAULT_LIMIT)) })}>
              Show more
            </button>
          )}
        </p>
      )}
      <SampleDiff picked={picked} onClear={() => setPicked([])} />
    </div>
  );
}
