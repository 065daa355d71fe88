import type { PromptAcrossRuns, RunSamplesAt, Sample } from '../../api/types';
import { formatNumber } from '../../lib/format';
import { labelOf, rewardSummary, rolloutScores, type Score } from '../run/samples/groups';

/** An answer picked for the diff, with what names it there. */
export interface Picked {
  key: string;
  runId: number;
  runLabel: string;
  sample: Sample;
}

export const pickKey = (runId: number, s: Sample) => `${runId}:${s.id}`;
export const runLabel = (r: RunSamplesAt) => `#${r.run_id} ${r.name}`.trim();

export interface DiffPicks {
  picked: readonly Picked[];
  toggle: (pick: Picked) => void;
}

/** An answer's numbers: reward, its components, advantage, length, KL, a pair's margin, then the rest the trainer logged. */
function answerScores(s: Sample): Score[] {
  const scores = rolloutScores(s).filter((x) => x.name !== 'truncated');
  if (s.scores.margin != null) scores.push({ name: 'margin', value: s.scores.margin });
  return scores;
}

function Answer({ sample, run, picks }: { sample: Sample; run: RunSamplesAt; picks: DiffPicks }) {
  const label = labelOf(sample);
  const key = pickKey(run.run_id, sample);
  const checked = picks.picked.some((p) => p.key === key);
  const truncated = sample.scores.truncated === 1;
  return (
    <article
      className={`cmp-answer label-${label}`}
      data-testid="sample-answer"
      data-sample-id={sample.id}
      data-run={run.run_id}
      data-step={sample.step}
      data-index={sample.index}
      data-label={label}
      data-truncated={truncated || undefined}
    >
      <div className="cmp-answer-head">
        {label !== 'rollout' && <span className={`cmp-label cmp-label-${label}`}>{label}</span>}
        {truncated && (
          <span className="cmp-truncated" title="It ran out of tokens before it finished.">
            truncated
          </span>
        )}
        <span className="muted">#{sample.index}</span>
        <label className="check cmp-pick">
          <input
            type="checkbox"
            checked={checked}
            disabled={!checked && picks.picked.length >= 2}
            onChange={() => picks.toggle({ key, runId: run.run_id, runLabel: runLabel(run), sample })}
            aria-label={`Diff answer ${sample.index} of run ${run.run_id} at step ${sample.step}`}
          />
          diff
        </label>
      </div>
      <ul className="scores" aria-label="Scores">
        {answerScores(sample).map((s) => (
          <li
            key={s.name}
            data-score={s.name}
            className={s.name.startsWith('reward/') && typeof s.value === 'number' && s.value <= 0 ? 'score-failed' : undefined}
          >
            <span className="muted">{s.name}</span> <span className="num">{formatNumber(s.value)}</span>
            {s.unit && <span className="muted"> {s.unit}</span>}
          </li>
        ))}
      </ul>
      {sample.turns?.length ? (
        <ol className="cmp-turns" aria-label="Turns">
          {sample.turns.map((t, i) => (
            <li key={i} data-role={t.role}>
              <span className="muted">{t.role === 'policy' ? 'Policy' : 'Environment'}</span>
              <pre>{t.text || <span className="muted">(empty)</span>}</pre>
            </li>
          ))}
        </ol>
      ) : (
        <pre className="response">{sample.response || <span className="muted">(empty)</span>}</pre>
      )}
    </article>
  );
}

function Answers({ samples, run, picks }: { samples: readonly Sample[]; run: RunSamplesAt; picks: DiffPicks }) {
  const summary = samples.length > 1 ? rewardSummary(samples) : null;
  return (
    <>
      {summary && (
        <p className="muted cmp-summary">
          {samples.length} answers · reward mean {formatNumber(summary.mean)}, min {formatNumber(summary.min)}, max {formatNumber(summary.max)}
        </p>
      )}
      {samples.map((s) => (
        <Answer key={s.id} sample={s} run={run} picks={picks} />
      ))}
    </>
  );
}

function byStep(samples: readonly Sample[]): Array<[number, Sample[]]> {
  const steps = new Map<number, Sample[]>();
  for (const s of [...samples].sort((a, b) => a.step - b.step || a.index - b.index)) {
    const list = steps.get(s.step) ?? [];
    list.push(s);
    steps.set(s.step, list);
  }
  return [...steps];
}

interface ColumnProps {
  run: RunSamplesAt;
  color: string;
  samples: readonly Sample[];
  following: boolean;
  filtered: boolean;
  picks: DiffPicks;
}

function RunColumn({ run, color, samples, following, filtered, picks }: ColumnProps) {
  const noStep = run.step == null && (!following || run.why != null);
  let body;
  if (noStep) {
    body = (
      <p className="muted cmp-why" data-testid="run-why">
        {run.why ?? 'No step to show.'}
      </p>
    );
  } else if (!samples.length) {
    const where = following ? '' : ` at step ${run.step}`;
    body = <p className="muted">No answer to this prompt{where}{filtered ? ' matches the filters' : ''}.</p>;
  } else if (following) {
    body = byStep(samples).map(([step, list]) => (
      <section key={step} className="cmp-step" data-step={step} aria-label={`Step ${step}`}>
        <h4>Step {step}</h4>
        <Answers samples={list} run={run} picks={picks} />
      </section>
    ));
  } else {
    body = <Answers samples={samples} run={run} picks={picks} />;
  }
  return (
    <div
      className="cmp-column"
      data-testid="sample-column"
      data-run={run.run_id}
      data-step={run.step ?? undefined}
      role="group"
      aria-label={runLabel(run)}
      style={{ borderTopColor: color }}
    >
      <div className="cmp-column-head">
        <span className="swatch" style={{ background: color }} aria-hidden="true" />
        <strong>{runLabel(run)}</strong>
        {!following && run.step != null && <span className="muted">step {run.step}</span>}
      </div>
      {body}
    </div>
  );
}

interface PromptProps {
  prompt: PromptAcrossRuns;
  runs: readonly RunSamplesAt[];
  colors: ReadonlyMap<number, string>;
  following: boolean;
  filtered: boolean;
  onFollow: (hash: string) => void;
  picks: DiffPicks;
}

/** One prompt, then a column per compared run with its answers (wrapping onto rows rather than widening the page). */
export function PromptAcross({ prompt, runs, colors, following, filtered, onFollow, picks }: PromptProps) {
  return (
    <section className="cmp-prompt" data-testid="sample-prompt" data-prompt-hash={prompt.prompt_hash} aria-label="Prompt">
      <div className="cmp-prompt-head">
        <div className="cmp-text">
          <div className="field-label">Prompt</div>
          <pre className="prompt">{prompt.prompt || <span className="muted">(empty)</span>}</pre>
          {prompt.reference != null && (
            <>
              <div className="field-label">Reference answer</div>
              <pre className="reference">{prompt.reference}</pre>
            </>
          )}
        </div>
        {!following && (
          <button type="button" data-testid="follow-prompt" onClick={() => onFollow(prompt.prompt_hash)} title="This prompt's answers at every step, in each run">
            Follow
          </button>
        )}
      </div>
      <div className="cmp-columns">
        {runs.map((r) => (
          <RunColumn
            key={r.run_id}
            run={r}
            color={colors.get(r.run_id) ?? 'var(--border)'}
            samples={prompt.samples[String(r.run_id)] ?? []}
            following={following}
            filtered={filtered}
            picks={picks}
          />
        ))}
      </div>
    </section>
  );
}
