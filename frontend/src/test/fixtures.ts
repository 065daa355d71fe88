import type { Alert } from '../api/alerts';
import type { PipelineDetail, Stage } from '../api/pipelines';
import type { SweepDetail, Trial } from '../api/sweeps';
import type { RunDetail, Sample } from '../api/types';

/** A run detail as GET /runs/{id} answers it, with overrides. */
export function runDetail(over: Partial<RunDetail> = {}): RunDetail {
  return {
    id: 7, name: 'base', project: 'default', algorithm: 'sft', backend: 'torch', queue: 'cpu', priority: 50, preempted_by: null, status: 'running',
    status_reason: '', archived: false, total_steps: 100, last_step: 40, created_by: 'admin',
    created_at: '2025-01-01T00:00:00Z', updated_at: '2025-01-01T00:00:00Z', started_at: '2025-01-01T00:00:00Z',
    ended_at: null, failure: null, resumable: false,
    config: { model: 'builtin:tiny-gpt2', lr: 0.0003, batch_size: 8, steps: 100, backend: 'torch', precision: 'fp32' },
    // only the spec fields the views read: a stored spec has every field, defaults filled in
    spec: { name: 'base', algorithm: 'sft', dpo: null, model: { path: 'builtin:tiny-gpt2' } } as unknown as RunDetail['spec'],
    spec_text: '# my notes\nname: base\nalgorithm: sft\nmodel:\n  path: builtin:tiny-gpt2  # small\n',
    parents: [], children: [], attempts: [], latest_checkpoint_step: null, output: null, gpu_seconds: 0, cpu_slot_seconds: 0,
    ...over,
  };
}

/** A command run (the user's own script) as GET /runs/{id} answers it: its stored spec, with `command` overrides. */
export function commandRunDetail(command: Record<string, unknown> = {}, over: Partial<RunDetail> = {}): RunDetail {
  const spec = {
    name: 'trl-sft', algorithm: 'command', model: null, data: null, train: { steps: 200, lr: 0.0001 },
    command: {
      argv: ['python', 'sft.py', '--model', '{command.config.model}', '--lr', '{train.lr}', '--note', 'two words'],
      config: { model: 'HuggingFaceTB/SmolLM2-135M' }, env: { HF_HOME: '/cache/hf', WANDB_MODE: 'offline' },
      stop_grace_s: 60, external: false,
      code: {
        snapshot: 'ab12'.repeat(16), path: null, git_commit: 'c0ffee1234567890c0ffee1234567890c0ffee12', git_dirty: false,
        git_diff: null, files: 12, size: 4567,
      },
      ...command,
    },
  };
  return runDetail({
    name: 'trl-sft', algorithm: 'command', total_steps: 200, spec: spec as unknown as RunDetail['spec'], spec_text: null, ...over,
  });
}

let nextId = 1;
/** A sample as GET /runs/{id}/samples answers it. */
export function sample(over: Partial<Sample> = {}): Sample {
  const prompt = over.prompt ?? 'p';
  return {
    id: nextId++, step: 1, index: 0, prompt, prompt_hash: `h-${prompt}`, response: 'r', reward: null, kl: null,
    scores: {}, label: null, reference: null, turns: null, time: 0,
    ...over,
  };
}

export const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

/** A stage as GET /pipelines/{id} answers it, with overrides. */
export function pipelineStage(name: string, over: Partial<Stage> = {}): Stage {
  return { name, status: 'waiting', reason: null, needs: [], when: null, gate: [], run_id: null, run_status: null, headline: null, runs: [], sweep_id: null, ...over };
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

/** A trial as GET /sweeps/{id} answers it, with overrides. */
export function sweepTrial(number: number, params: Record<string, unknown>, over: Partial<Trial> = {}): Trial {
  return { number, params, run_id: 20 + number, run_status: 'succeeded', state: 'complete', value: null, reason: null, ...over };
}

/**
 * sft-lr, running, searching a log-scaled learning rate, a batch size among three and an int warm-up for the
 * lowest eval/loss: trial 3 is the best, 1 finished worse, 4 was pruned (with its last value), 2 failed, 5 runs.
 */
export function sweepDetail(over: Partial<SweepDetail> = {}): SweepDetail {
  const trials = [
    sweepTrial(1, { 'train.lr': 0.0001, 'train.batch_size': 16, 'train.warmup_steps': 10 }, { value: 0.9 }),
    sweepTrial(2, { 'train.lr': 0.001, 'train.batch_size': 32, 'train.warmup_steps': 0 }, {
      state: 'failed', run_status: 'failed', reason: 'run #22 failed: CUDA out of memory',
    }),
    sweepTrial(3, { 'train.lr': 0.00031622776601683794, 'train.batch_size': 8, 'train.warmup_steps': 50 }, { value: 0.42 }),
    sweepTrial(4, { 'train.lr': 0.00001, 'train.batch_size': 16, 'train.warmup_steps': 20 }, {
      state: 'pruned', run_status: 'cancelled', value: 1.7, reason: 'stopped early at step 100: eval/loss 1.7 (median)',
    }),
    sweepTrial(5, { 'train.lr': 0.00005, 'train.batch_size': 32, 'train.warmup_steps': 30 }, { state: 'running', run_status: 'running' }),
  ];
  return {
    id: 4, name: 'sft-lr', project: 'default', status: 'running', reason: null, method: 'tpe', metric: 'eval/loss', goal: 'min',
    trials: 5, budget: 12, parallel: 2, best_value: 0.42, created_at: '2025-01-01T00:00:00Z', updated_at: '2025-01-01T01:00:00Z',
    space: {
      'train.lr': { type: 'float', low: 0.00001, high: 0.001, log: true, step: null },
      'train.batch_size': { type: 'categorical', choices: [8, 16, 32] },
      'train.warmup_steps': { type: 'int', low: 0, high: 50, step: 10, log: false },
    },
    early_stopping: { method: 'median', min_steps: 100, min_trials: 3 },
    best: trials[2]!,
    trial_list: trials,
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
