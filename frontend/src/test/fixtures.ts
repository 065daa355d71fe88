import type { RunDetail, Sample } from '../api/types';

/** A run detail as GET /runs/{id} answers it, with overrides. */
export function runDetail(over: Partial<RunDetail> = {}): RunDetail {
  return {
    id: 7, name: 'base', project: 'default', algorithm: 'sft', backend: 'torch', queue: 'cpu', status: 'running',
    status_reason: '', archived: false, total_steps: 100, last_step: 40, created_by: 'admin',
    created_at: '2025-01-01T00:00:00Z', updated_at: '2025-01-01T00:00:00Z', started_at: '2025-01-01T00:00:00Z',
    ended_at: null, failure: null, resumable: false,
    config: { model: 'builtin:tiny-gpt2', lr: 0.0003, batch_size: 8, steps: 100, backend: 'torch', precision: 'fp32' },
    spec: { name: 'base', algorithm: 'sft', dpo: null, model: { path: 'builtin:tiny-gpt2' } },
    spec_text: '# my notes\nname: base\nalgorithm: sft\nmodel:\n  path: builtin:tiny-gpt2  # small\n',
    parents: [], children: [], attempts: [], latest_checkpoint_step: null, output: null,
    ...over,
  };
}

let nextId = 1;
/** A sample as GET /runs/{id}/samples answers it. */
export function sample(over: Partial<Sample> = {}): Sample {
  const prompt = over.prompt ?? 'p';
  return {
    id: nextId++, step: 1, index: 0, prompt, prompt_hash: `h-${prompt}`, response: 'r', reward: null, kl: null,
    scores: {}, label: null, reference: null, time: 0,
    ...over,
  };
}

export const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
