import { describe, expect, it } from 'vitest';
import { candidateGroups, findDuplicates, sameSeries } from './duplicates';
import { emptyBuffer, type SeriesBuffer } from './series';

const buf = (values: Array<number | null>, steps = values.map((_, i) => i * 10)): SeriesBuffer => ({
  ...emptyBuffer(), steps, times: steps, values, mins: values, maxs: values,
});

describe('identical series', () => {
  it('are found from the data: candidates share count and last point, the points decide', () => {
    const keys = [
      { key: 'reward/mean', points: 3, signature: '3|20|0.5' },
      { key: 'reward/arithmetic', points: 3, signature: '3|20|0.5' },
      { key: 'reward/format', points: 3, signature: '3|20|0.5' },
      { key: 'reward/std', points: 3, signature: '3|20|0.1' },
    ];
    const groups = candidateGroups(keys);
    expect(groups).toEqual([['reward/mean', 'reward/arithmetic', 'reward/format']]);
    const data: Record<string, SeriesBuffer> = {
      'reward/mean': buf([0.1, 0.3, 0.5]),
      'reward/arithmetic': buf([0.1, 0.3, 0.5 + 1e-15]),
      'reward/format': buf([0.2, 0.3, 0.5]), // same last point, different history: not a duplicate
    };
    expect(findDuplicates(groups, (k) => [data[k]])).toEqual(new Map([['reward/arithmetic', 'reward/mean']]));
  });

  it('keeps the key read first (eval/accuracy over eval/reward/arithmetic), and waits for both histories', () => {
    const groups = [['eval/reward/arithmetic', 'eval/accuracy']];
    const same = buf([0.2, 0.4]);
    expect(findDuplicates(groups, () => [same])).toEqual(new Map([['eval/reward/arithmetic', 'eval/accuracy']]));
    expect(findDuplicates(groups, (k) => (k === 'eval/accuracy' ? [same] : null)).size).toBe(0);
  });

  it('needs every compared run to agree', () => {
    const groups = [['a/mean', 'a/x']];
    const one = buf([1, 2]);
    expect(findDuplicates(groups, (k) => (k === 'a/mean' ? [one, one] : [one, buf([1, 3])])).size).toBe(0);
    expect(findDuplicates(groups, () => [one, undefined]).size).toBe(1);
  });

  it('does not merge constant series or different steps', () => {
    expect(sameSeries(buf([0, 0, 0]), buf([0, 0, 0]))).toBe(false);
    expect(sameSeries(buf([1, 2], [0, 1]), buf([1, 2], [0, 2]))).toBe(false);
    expect(sameSeries(buf([1, null, 2]), buf([1, null, 2]))).toBe(true);
  });
});
