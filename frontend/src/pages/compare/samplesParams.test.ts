import { describe, expect, it } from 'vitest';
import { parseSamplesState, samplesQuery } from './samplesParams';

const state = (search: string) => parseSamplesState(new URLSearchParams(search));

describe('the Samples view in the URL', () => {
  it('reads defaults from an empty URL and drops what the API would refuse', () => {
    expect(state('')).toEqual({
      at: 'latest', step: null, metric: '', mode: 'max', promptHash: null, rewardBelow: null, truncated: false, failed: '', limit: 50,
    });
    // at=all needs a prompt; a hash the API would not take is no prompt.
    expect(state('at=all').at).toBe('latest');
    expect(state('at=all&prompt_hash=XYZ')).toMatchObject({ at: 'latest', promptHash: null });
    expect(state('at=step&step=-3&limit=9999&reward_below=abc')).toMatchObject({ at: 'step', step: null, limit: 500, rewardBelow: null });
  });

  it('asks for a step or a metric before sending anything, then sends only what is set', () => {
    expect(samplesQuery([3, 7], state('at=step'))).toEqual({ missing: expect.stringMatching(/^Enter a step/) });
    expect(samplesQuery([3, 7], state('at=best&mode=min'))).toEqual({ missing: expect.stringMatching(/^Enter a metric/) });
    expect(samplesQuery([], state(''))).toHaveProperty('missing');
    expect(samplesQuery([3, 7], state('at=best&metric=eval/accuracy&mode=min&step=5&truncated=1'))).toEqual({
      query: { runs: '3,7', at: 'best', metric: 'eval/accuracy', mode: 'min', truncated: true, limit: 50 },
    });
    expect(samplesQuery([3, 7], state('at=all&prompt_hash=ab12&reward_below=-0.5&failed=reward/format&limit=100'))).toEqual({
      query: { runs: '3,7', at: 'all', prompt_hash: 'ab12', reward_below: -0.5, failed: 'reward/format', limit: 100 },
    });
    const many = Array.from({ length: 25 }, (_, i) => i + 1);
    expect((samplesQuery(many, state('')) as { query: { runs: string } }).query.runs.split(',')).toHaveLength(20);
  });
});
