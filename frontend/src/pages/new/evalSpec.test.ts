import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { type EvalSource, evalText } from './evalSpec';
import { TEMPLATES } from './spec';

// Specs as GET /runs/{id} stores them: every section present, defaults filled in, the others null.
const grpo = {
  name: 'grpo-math',
  project: 'maths',
  spec: {
    name: 'grpo-math', algorithm: 'grpo', project: 'maths', ppo: null,
    model: { path: 'run:3@250', max_seq_len: 96 },
    data: { source: 'dataset:12', split: 'train', eval_fraction: 0.1, columns: { prompt: 'question' } },
    reward: { kind: 'python', entrypoint: 'my_rewards:exact', scale: 1.0, clip: null },
    resources: { queue: 'gpu', gpus: 1 },
    grpo: { group_size: 8, gen: { max_new_tokens: 24, temperature: 0.7, stop: ['\n'] } },
  },
};
const sft = {
  name: 'sft-base',
  project: 'default',
  spec: {
    name: 'sft-base', algorithm: 'sft', reward: null, grpo: null, ppo: null,
    model: { path: 'builtin:tiny-gpt2', max_seq_len: 64 },
    data: { source: 'builtin:tiny-sft', split: 'train' },
    resources: { queue: 'cpu', gpus: 0 },
  },
};

// The runs below hold only the spec fields an evaluation reads: a stored spec has every other field too.
const source = (run: object) => run as unknown as EvalSource;

describe('evalText', () => {
  it("judges a GRPO run's checkpoint on the run's data with its reward, lengths and resources, comments kept", () => {
    const { text, note } = evalText('run:7@200', source(grpo));
    const spec = parse(text);
    expect(spec).toMatchObject({
      name: 'eval-grpo-math',
      project: 'maths',
      algorithm: 'eval',
      tags: ['eval'],
      model: { path: 'run:7@200', max_seq_len: 96 },
      data: grpo.spec.data,
      reward: grpo.spec.reward,
      resources: { queue: 'gpu', gpus: 1 },
      // The template's sampling, with the run's response length and stop strings.
      eval: { samples: 8, k: [1, 4, 8], gen: { max_new_tokens: 24, temperature: 1.0, stop: ['\n'] } },
    });
    expect(note).toBeNull();
    expect(text).toMatch(/^# Evaluation: score a checkpoint's answers/);
    expect(text).toContain('path: run:7@200 # or run:<id>@100');
    expect(text).toContain('samples: 8 # answers per prompt (n of pass@k)');
    // The template's flow-style sections stay one line each.
    expect(text).toContain('reward: {kind: python, entrypoint: my_rewards:exact, scale: 1, clip: null}');
    expect(text).toContain('resources: {queue: gpu, gpus: 1}');
  });

  it("keeps the template's reward for a run without one (SFT), and says so", () => {
    const { text, note } = evalText('run:4', source(sft));
    const spec = parse(text);
    expect(spec.reward).toEqual(parse(TEMPLATES.eval).reward);
    expect(spec).toMatchObject({ name: 'eval-sft-base', model: { path: 'run:4', max_seq_len: 64 }, data: sft.spec.data });
    // No RL sampling to keep: the template's response length.
    expect(spec.eval.gen).toEqual(parse(TEMPLATES.eval).eval.gen);
    expect(note).toBe("Run sft-base has no reward to reuse: choose one (the reward below is the template's).");
  });

  it('judges a run that played episodes on episodes of its environment, with no reward where it had none', () => {
    const environment = { kind: 'builtin', name: 'calculator', max_turns: 3, max_tokens: 56, chat_role: 'user' };
    const played = { ...grpo, spec: { ...grpo.spec, reward: null, grpo: { ...grpo.spec.grpo, environment } } };
    const { text, note } = evalText('run:7', source(played));
    const spec = parse(text);
    expect(spec.eval.environment).toEqual(environment);
    expect(spec.reward).toBeNull();
    expect(note).toBeNull();
  });

  it('without a source run is the template judging the given model', () => {
    const { text, note } = evalText('run:9@50');
    expect(text).toBe(TEMPLATES.eval.replace('path: run:<id of your grpo-arithmetic run>@100', 'path: run:9@50'));
    expect(note).toBeNull();
  });
});
