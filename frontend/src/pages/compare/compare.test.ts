import { describe, expect, it, vi } from 'vitest';
import type { Series } from '../../api/types';
import { parseSmoothing } from '../../charts/ChartControls';
import { asColumns } from '../../charts/testSeries';
import { CompareStore } from './compareStore';
import { parseRunIds, toSearch, withRunIds } from './params';
import { diffSpecs, flattenSpec } from './specDiff';

const series = (key: string, steps: number[]): Series => ({
  key, total_points: steps.length, downsampled: false,
  points: steps.map((s) => ({ step: s, value: s, min: s, max: s, count: 1, time: s, first_nan_step: null })),
});
const summary = (key: string, count: number) => ({ key, count, last_step: count, last_value: count, last_time: 1 });

describe('CompareStore', () => {
  it('gives a chart a line per run, fetched per run when the chart asks, and refetched when a run gains points', async () => {
    const asked: Array<[number, string[]]> = [];
    const store = new CompareStore(async (run, keys) => {
      asked.push([run, keys]);
      return keys.map((k) => asColumns(series(k, run === 3 ? [0, 10, 20] : [5, 15])));
    });
    store.setRuns([{ id: 3, label: '#3 a', color: 'var(--series-0)' }, { id: 7, label: '#7 b', color: 'var(--series-1)' }]);
    store.setKeys(3, [summary('train/loss', 3), summary('train/lr', 2)]);
    store.setKeys(7, [summary('train/loss', 2)]);
    expect(store.keys().map((k) => [k.key, k.points])).toEqual([['train/loss', 3], ['train/lr', 2]]);
    store.request('train/loss');
    await vi.waitFor(() => expect(store.loaded('train/loss')).toBe(true));
    expect(asked).toEqual([[3, ['train/loss']], [7, ['train/loss']]]);
    expect(store.lines('train/loss').map((l) => [l.label, l.buf?.steps])).toEqual([['#3 a', [0, 10, 20]], ['#7 b', [5, 15]]]);
    expect(store.loaded('train/lr')).toBe(false);
    store.setKeys(7, [summary('train/loss', 3)]);
    await vi.waitFor(() => expect(asked).toHaveLength(3));
    expect(asked[2]).toEqual([7, ['train/loss']]);
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
  it('flattens objects to dotted paths and keeps a list whole, as JSON', () => {
    const flat = flattenSpec({ model: { name: 'gpt2' }, data: { files: ['a', 'b'] }, tags: [], opt: {}, x: null, n: 1 });
    expect(Object.fromEntries(flat)).toEqual({
      'model.name': '"gpt2"', 'data.files': '["a","b"]', tags: '[]', opt: '{}', x: 'null', n: '1',
    });
  });

  it('counts an absent field as an empty list or object, and lists a differing list as one row', () => {
    const absent = flattenSpec({ seed: 1 });
    const empty = flattenSpec({ seed: 1, tags: [], opt: {} });
    const tagged = flattenSpec({ seed: 1, tags: ['a', 'b'], opt: {} });
    expect(diffSpecs([absent, empty], false)).toEqual([]);
    expect(diffSpecs([absent, empty, tagged], false)).toEqual([
      { path: 'tags', values: [undefined, '[]', '["a","b"]'], differs: true },
    ]);
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
  it('keeps commas and slashes readable', () => {
    expect(toSearch(new URLSearchParams('runs=1,2&smooth=0.5'))).toBe('?runs=1,2&smooth=0.5');
    expect(toSearch(new URLSearchParams({ metric: 'eval/accuracy', search: 'a&b' }))).toBe('?metric=eval/accuracy&search=a%26b');
    expect(toSearch(new URLSearchParams())).toBe('');
  });
});
