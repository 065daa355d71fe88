import type { Alert } from '../api/alerts';
import type { PipelineDetail, Stage } from '../api/pipelines';
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

/** A stage as GET /pipelines/{id} answers it, with overrides. */
export function pipelineStage(name: string, over: Partial<Stage> = {}): Stage {
  return { name, status: 'waiting', reason: null, needs: [], when: null, run_id: null, run_status: null, headline: null, runs: [], sweep_id: null, ...over };
}

/** sft -> rm -> ppo, ppo needing both: sft succeeded, rm failed, so ppo was skipped. */
export function pipelineChain(over: Partial<PipelineDetail> = {}): PipelineDetail {
  return {
    id: 5, name: 'rlhf', project: 'default', status: 'failed', reason: 'stage rm failed',
    created_at: '2025-01-01T00:00:00Z', updated_at: '2025-01-01T01:00:00Z', document: {},
    stages: [
      pipelineStage('sft', { status: 'succeeded', run_id: 11, run_status: 'succeeded', runs: [11], headline: { key: 'eval/loss', value: 1.234 } }),
      pipelineStage('rm', {
        status: 'failed', needs: ['sft'], when: 'stages.sft.metrics["eval/loss"] < 1.5', reason: 'run #12 failed: CUDA out of memory',
        run_id: 12, run_status: 'failed', runs: [9, 12], headline: { key: 'train/loss', value: null },
      }),
      pipelineStage('ppo', { status: 'skipped', needs: ['sft', 'rm'], reason: 'rm failed' }),
    ],
    ...over,
  };
}

/** An alert as GET /alerts answers it: open, from rule 3 on run 7, with overrides. */
export function alertOf(over: Partial<Alert> = {}): Alert {
  return {
    id: nextId++, run_id: 7, run_name: 'base', project: 'default', rule_id: 3, source: 'rule:3', name: 'loss spike',
    message: 'train/loss 9.1 > 5 at step 40', state: 'open', fired_at: '2025-01-01T00:05:00Z', resolved_at: null,
    delivery: 'none', deliveries: [],
    ...over,
  };
}
