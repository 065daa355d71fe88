import { useState } from 'react';
import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import type { Sample } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { formatNumber } from '../../lib/format';
import { useRunContext } from './context';

function SampleCard({ sample, showStep }: { sample: Sample; showStep?: boolean }) {
  return (
    <article className="sample">
      <header className="muted">
        {showStep ? `step ${sample.step} · ` : ''}#{sample.index} · reward {formatNumber(sample.reward)} · kl {formatNumber(sample.kl)}
        {Object.entries(sample.scores).map(([k, v]) => ` · ${k} ${formatNumber(v)}`)}
      </header>
      {!showStep && <pre className="prompt">{sample.prompt}</pre>}
      <pre className="response">{sample.response}</pre>
    </article>
  );
}

export function SamplesTab() {
  const { run } = useRunContext();
  const [step, setStep] = useState<number | null>(null);
  const [byReward, setByReward] = useState(false);
  const [prompt, setPrompt] = useState('');
  const path = { run_id: run.id };

  const prompts = useQuery({
    queryKey: ['prompts', run.id],
    queryFn: () => unwrap(api.GET('/api/v1/runs/{run_id}/samples/prompts', { params: { path, query: { limit: 1000 } } })),
    refetchInterval: 15_000,
  });
  const lastStep = prompts.data?.data.reduce((m, p) => Math.max(m, p.last_step), -1) ?? -1;
  const shownStep = step ?? (lastStep >= 0 ? lastStep : null);

  const atStep = useQuery({
    queryKey: ['samples', run.id, shownStep, byReward],
    enabled: shownStep != null && !prompt,
    placeholderData: keepPreviousData,
    queryFn: () =>
      unwrap(
        api.GET('/api/v1/runs/{run_id}/samples', {
          params: { path, query: { step: shownStep ?? 0, sort: byReward ? '-reward' : 'step', limit: 200 } },
        }),
      ),
  });
  const acrossSteps = useQuery({
    queryKey: ['samples-prompt', run.id, prompt],
    enabled: !!prompt,
    queryFn: () =>
      unwrap(api.GET('/api/v1/runs/{run_id}/samples', { params: { path, query: { prompt_hash: prompt, limit: 1000 } } })),
  });

  if (prompts.data && prompts.data.count === 0) return <p className="muted">This run has logged no samples yet.</p>;

  return (
    <div className="samples-tab">
      <form className="sample-controls" onSubmit={(e) => e.preventDefault()}>
        <label htmlFor="sample-step">Step</label>
        <input
          id="sample-step"
          type="number"
          min={0}
          value={shownStep ?? ''}
          onChange={(e) => setStep(e.target.value === '' ? null : Number(e.target.value))}
          disabled={!!prompt}
        />
        <label className="check">
          <input type="checkbox" checked={byReward} onChange={(e) => setByReward(e.target.checked)} disabled={!!prompt} />
          Sort by reward
        </label>
        <label htmlFor="sample-prompt">Follow a prompt</label>
        <select id="sample-prompt" value={prompt} onChange={(e) => setPrompt(e.target.value)}>
          <option value="">— one step, all prompts —</option>
          {prompts.data?.data.map((p) => (
            <option key={p.prompt_hash} value={p.prompt_hash}>
              {p.prompt.slice(0, 80)} ({p.samples} samples, steps {p.first_step}–{p.last_step})
            </option>
          ))}
        </select>
      </form>
      <ErrorNote error={prompts.error ?? atStep.error ?? acrossSteps.error} />
      {prompt && acrossSteps.data && (
        <>
          <pre className="prompt">{acrossSteps.data.data[0]?.prompt}</pre>
          <div className="side-by-side">
            {acrossSteps.data.data.map((s) => (
              <SampleCard key={s.id} sample={s} showStep />
            ))}
          </div>
        </>
      )}
      {!prompt && atStep.data && (
        <div className="sample-list">
          {atStep.data.data.length === 0 && <p className="muted">No samples at step {shownStep}.</p>}
          {atStep.data.data.map((s) => (
            <SampleCard key={s.id} sample={s} />
          ))}
        </div>
      )}
    </div>
  );
}
