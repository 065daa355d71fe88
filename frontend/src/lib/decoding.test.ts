import { describe, expect, it } from 'vitest';
import { decodingLabel, isAccuracyKey, runDecoding } from './decoding';

describe('decoding', () => {
  it('shortens the API words: greedy, T=<temperature>, ×<answers per prompt>; other words as they are', () => {
    expect(decodingLabel('greedy')).toBe('greedy');
    expect(decodingLabel('sampled at T=1')).toBe('T=1');
    expect(decodingLabel('sampled at T=0.7, 8 per prompt')).toBe('T=0.7 ×8');
    expect(decodingLabel('beam search, 4 beams')).toBe('beam search, 4 beams');
  });

  it('labels only the keys that count right answers', () => {
    expect(['eval/accuracy', 'eval/pass@1', 'eval/pass@16', 'eval/success'].every(isAccuracyKey)).toBe(true);
    expect(['eval/reward', 'eval/loss', 'train/accuracy', 'reward/mean', 'eval/pass@k', 'eval/accuracy/x'].some(isAccuracyKey)).toBe(false);
  });

  it("reads a run's config.decoding, null where there is none", () => {
    expect(runDecoding({ decoding: 'greedy' })).toBe('greedy');
    expect(runDecoding({ decoding: null })).toBeNull();
    expect(runDecoding({})).toBeNull();
    expect(runDecoding(undefined)).toBeNull();
  });
});
