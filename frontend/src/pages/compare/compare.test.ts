import { describe, expect, it } from 'vitest';
import { alignRuns, runsWithData, seriesByKey, shapeForChart } from './align';
import { parseSmoothing } from '../../charts/ChartControls';
import { parseRunIds, toSearch, withRunIds } from './params';
import { diffSpecs, flattenSpec } from './specDiff';

const pts = (...pairs: Array<[number, unknown]>) => pairs.map(([step, value]) => ({ step, value }));
const series = (key: string, n: number) => ({
  key, total_points: n, downsampled: false,
  points: Array.from({ length: n }, (_, i) => ({ step: i, value: i, min: i, max: i, count: 1, time: i })),
});

describe('alignRuns', () => {
  it('puts every run on the sorted union of steps with null gaps', () => {
    const a = alignRuns([pts([0, 1], [10, 2], [20, 3]), pts([5, 9], [10, 8]), undefined]);
    expect(a.steps).toEqual([0, 5, 10, 20]);
    expect(a.values).toEqual([
      [1, null, 2, 3],
      [null, 9, 8, null],
      [null, null, null, null],
    ]);
  });

  it('turns NaN, null and the API string spellings into gaps', () => {
    const a = alignRuns([pts([1, null], [2, 'NaN'], [3, Number.NaN], [4, 'Infinity'], [5, 0.5])]);
    expect(a.values[0]).toEqual([null, null, null, null, 0.5]);
  });

  it('smooths each run and blanks non-positive values on log scales', () => {
    const a = alignRuns([pts([0, 1], [1, 1]), pts([0, -1], [1, 4])]);
    expect(shapeForChart(a, 0, false)).toEqual([[0, 1], [1, 1], [-1, 4]]);
    expect(shapeForChart(a, 0, true)).toEqual([[0, 1], [1, 1], [null, 4]]);
    const smoothed = shapeForChart(a, 0.5, false);
    expect(smoothed[1]).toEqual([1, 1]); // debiased EMA of a constant is the constant
  });
});

describe('seriesByKey', () => {
  it('takes the union of keys and leaves runs without a key undefined', () => {
    const byKey = seriesByKey([[series('loss', 3), series('lr', 2)], [series('loss', 0)], undefined]);
    expect([...byKey.keys()].sort()).toEqual(['loss', 'lr']);
    expect(byKey.get('lr')!.map((s) => s?.key)).toEqual(['lr', undefined, undefined]);
    expect(runsWithData(byKey.get('loss')!)).toBe(1);
  });
});

describe('params', () => {
  it('parses runs=, keeps order, drops repeats and reports junk', () => {
    expect(parseRunIds('3, 7,9,3,abc,-1,0,')).toEqual({ ids: [3, 7, 9], invalid: ['abc', '-1', '0'] });
    expect(parseRunIds(null)).toEqual({ ids: [], invalid: [] });
    expect(withRunIds(new URLSearchParams('runs=1,2&smooth=0.3'), [2]).toString()).toBe('runs=2&smooth=0.3');
    expect(withRunIds(new URLSearchParams('runs=1'), []).toString()).toBe('');
  });

  it('clamps smoothing', () => {
    expect(parseSmoothing(null)).toBe(0.6);
    expect(parseSmoothing('2')).toBe(0.99);
    expect(parseSmoothing('-1')).toBe(0);
    expect(parseSmoothing('x')).toBe(0.6);
  });
});

describe('spec diff', () => {
  it('flattens to dotted paths with list indices and JSON values', () => {
    const flat = flattenSpec({ model: { name: 'gpt2' }, data: { files: ['a', 'b'] }, tags: [], opt: {}, x: null, n: 1 });
    expect(Object.fromEntries(flat)).toEqual({
      'model.name': '"gpt2"', 'data.files[0]': '"a"', 'data.files[1]': '"b"', tags: '[]', opt: '{}', x: 'null', n: '1',
    });
  });

  it('keeps only differing rows unless asked for all, and marks absent paths', () => {
    const a = flattenSpec({ train: { lr: 1e-5, steps: 100 }, seed: 1 });
    const b = flattenSpec({ train: { lr: 2e-5, steps: 100 }, seed: 1, extra: true });
    expect(diffSpecs([a, b], false)).toEqual([
      { path: 'extra', values: [undefined, 'true'], differs: true },
      { path: 'train.lr', values: ['0.00001', '0.00002'], differs: true },
    ]);
    const all = diffSpecs([a, b], true);
    expect(all.map((r) => r.path)).toEqual(['extra', 'seed', 'train.lr', 'train.steps']);
    expect(all.find((r) => r.path === 'seed')!.differs).toBe(false);
  });
});

describe('toSearch', () => {
  it('keeps commas readable', () => {
    expect(toSearch(new URLSearchParams('runs=1,2&smooth=0.5'))).toBe('?runs=1,2&smooth=0.5');
    expect(toSearch(new URLSearchParams())).toBe('');
  });
});
