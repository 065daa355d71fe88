import { describe, expect, it } from 'vitest';
import { sample } from '../../../test/fixtures';
import { groupByStep, groupSamples, pairScores, rewardSummary, rolloutScores } from './groups';

describe('groupSamples', () => {
  it("makes one group per prompt of a step, in the order the page lists them: a GRPO step's groups", () => {
    const samples = [
      sample({ step: 5, index: 0, prompt: '2+2=', response: '4', reward: 1 }),
      sample({ step: 5, index: 4, prompt: '3+5=', response: '8', reward: 1 }),
      sample({ step: 5, index: 1, prompt: '2+2=', response: '5', reward: 0 }),
      sample({ step: 5, index: 5, prompt: '3+5=', response: '9', reward: 0 }),
      sample({ step: 5, index: 2, prompt: '2+2=', response: '22', reward: 0 }),
    ];
    const groups = groupSamples(samples);
    expect(groups.map((g) => [g.prompt, g.rollouts.map((s) => s.response)])).toEqual([
      ['2+2=', ['4', '5', '22']],
      ['3+5=', ['8', '9']],
    ]);
    expect(groups.every((g) => g.pairs.length === 0 && g.generations.length === 0)).toBe(true);
    expect(rewardSummary(groups[0]!.rollouts)).toEqual({ mean: 1 / 3, min: 0, max: 1 });
  });

  it("puts a DPO evaluation's pair and generation for one prompt in one group, the pair with its margin", () => {
    const groups = groupSamples([
      sample({ step: 50, index: 1, prompt: 'q', label: 'rejected', response: 'bad', reward: -0.5, scores: { implicit_reward: -0.5, margin: 1.25 } }),
      sample({ step: 50, index: 0, prompt: 'q', label: 'chosen', response: 'good', reward: 0.75, scores: { implicit_reward: 0.75, margin: 1.25 } }),
      sample({ step: 50, index: 2, prompt: 'q', label: 'generation', response: 'mine', reference: 'good' }),
    ]);
    expect(groups).toHaveLength(1);
    const [group] = groups;
    expect(group!.pairs.map((p) => [p.chosen?.response, p.rejected?.response, p.margin])).toEqual([['good', 'bad', 1.25]]);
    expect(group!.generations.map((s) => [s.response, s.reference])).toEqual([['mine', 'good']]);
    expect(group!.rollouts).toEqual([]);
    expect(pairScores(group!.pairs[0]!.chosen!)).toEqual([{ name: 'implicit_reward', value: 0.75 }]);
  });

  it('computes a margin from the rewards when the trainer logged none, and keeps steps apart', () => {
    const groups = groupSamples([
      sample({ step: 1, prompt: 'q', label: 'chosen', reward: 2 }),
      sample({ step: 1, prompt: 'q', label: 'rejected', reward: 0.5 }),
      sample({ step: 2, prompt: 'q', label: 'chosen', reward: 'NaN' }),
      sample({ step: 2, prompt: 'q', label: 'rejected', reward: 0.5 }),
    ]);
    expect(groups.map((g) => [g.step, g.pairs[0]!.margin])).toEqual([[1, 1.5], [2, null]]);
  });

  it('groups one prompt across steps by step, oldest first', () => {
    const groups = groupByStep([sample({ step: 9, prompt: 'q' }), sample({ step: 3, prompt: 'q' }), sample({ step: 9, prompt: 'q', index: 1 })]);
    expect(groups.map((g) => [g.step, g.rollouts.length])).toEqual([[3, 1], [9, 2]]);
  });
});

describe('rolloutScores', () => {
  it('lists reward, its components, advantage, length, KL, then the rest; truncated only when it is', () => {
    const s = sample({
      reward: 0.5,
      kl: 0.02,
      scores: { length: 12, truncated: 0, advantage: -0.3, 'reward/format': 0, 'reward/arithmetic': 1, entropy: 2.5 },
    });
    expect(rolloutScores(s).map((x) => [x.name, x.value, x.unit])).toEqual([
      ['reward', 0.5, undefined],
      ['reward/arithmetic', 1, undefined],
      ['reward/format', 0, undefined],
      ['advantage', -0.3, undefined],
      ['length', 12, 'tokens'],
      ['KL', 0.02, undefined],
      ['entropy', 2.5, undefined],
    ]);
    expect(rolloutScores(sample({ scores: { truncated: 1 } }))).toEqual([{ name: 'truncated', value: 'yes' }]);
  });
});
