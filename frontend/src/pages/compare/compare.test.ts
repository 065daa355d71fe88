import { describe, expect, it, vi } from 'vitest';
import type { Series } from '../../api/types';
import { parseSmoothing } from '../../charts/ChartControls';
import { asColumns } from '../../charts/testSeries';
import type { RunSeriesColumns, SeriesWant } from './compareApi';
import { CompareStore } from './compareStore';
import { parseRunIds, toSearch, withRunIds } from './params';
import { diffSpecs, flattenSpec } from './specDiff';

const series = (key: string, steps: number[]): Series => ({
  key, total_points: steps.length, downsampled: false,
  points: steps.map((s) => ({ step: s, value: s, min: s, max: s, count: 1, time: s, first_nan_step: null })),
});
const summary = (key: string, count: number, lastStep = count) => ({ key, count, last_step: lastStep, last_value: count, last_time: 1 });
/** What POST /compare/series answers for one wanted series: `after` null for a whole series. */
const answer = (runId: number, key: string, steps: number[], after: number | null = null): RunSeriesColumns => ({
  ...asColumns(series(key, steps)), run_id: runId, after_step: after,
});
const LINES = [{ id: 3, label: '#3 a', color: 'var(--series-0)' }, { id: 7, label: '#7 b', color: 'var(--series-1)' }];

/** A store over a fake POST /compare/series: `reply` answers each wanted series; every request is recorded. */
function storeWith(reply: (w: SeriesWant) => RunSeriesColumns) {
  const asked: SeriesWant[][] = [];
  const store = new CompareStore(async (wanted) => {
    asked.push(wanted);
    return wanted.map(reply);
  });
  store.setRuns(LINES);
  return { store, asked };
}

const steps = (store: CompareStore, key: string) => store.lines(key).map((l) => l.buf?.steps);

describe('CompareStore', () => {
  it('gives a chart a line per run, all runs fetched in one request when the chart asks', async () => {
    const { store, asked } = storeWith(({ runId, key }) => answer(runId, key, runId === 3 ? [0, 10, 20] : [5, 15]));
    store.setKeys(3, [summary('train/loss', 3), summary('train/lr', 2)]);
    store.setKeys(7, [summary('train/loss', 2)]);
    expect(store.keys().map((k) => [k.key, k.points])).toEqual([['train/loss', 3], ['train/lr', 2]]);
    store.request('train/loss');
    store.request('train/lr');
    await vi.waitFor(() => expect(store.loaded('train/lr')).toBe(true));
    expect(asked).toEqual([[{ runId: 3, key: 'train/loss' }, { runId: 7, key: 'train/loss' }, { runId: 3, key: 'train/lr' }]]);
    expect(store.lines('train/loss').map((l) => [l.label, l.buf?.steps])).toEqual([['#3 a', [0, 10, 20]], ['#7 b', [5, 15]]]);
  });

  it("merges a poll's key lists into the chart list once, as one run's list at a time would", () => {
    const lists = [[3, [summary('train/loss', 3), summary('train/lr', 2)]], [7, [summary('train/loss', 5), summary('eval/acc', 1)]]] as const;
    const one = storeWith(({ runId, key }) => answer(runId, key, [0])).store;
    lists.forEach(([id, list]) => one.setKeys(id, list));
    const { store } = storeWith(({ runId, key }) => answer(runId, key, [0]));
    const merged = vi.fn();
    store.subscribeKeys(merged);
    store.setKeyLists(lists);
    expect(merged).toHaveBeenCalledTimes(1);
    expect(store.keys()).toEqual(one.keys());
    expect(store.keys().map((k) => [k.key, k.points])).toEqual([['train/loss', 5], ['train/lr', 2], ['eval/acc', 1]]);
  });

  it('fetches only the points past the held copy when a key gains some, for all runs of a poll in one request', async () => {
    const { store, asked } = storeWith(({ runId, key, afterStep }) =>
      afterStep == null ? answer(runId, key, runId === 3 ? [0, 10] : [5]) : answer(runId, key, [afterStep + 1, afterStep + 2], afterStep),
    );
    store.setKeys(3, [summary('train/loss', 2, 10)]);
    store.setKeys(7, [summary('train/loss', 1, 5)]);
    store.request('train/loss');
    await vi.waitFor(() => expect(store.loaded('train/loss')).toBe(true));
    const drawn = vi.fn();
    store.subscribe('train/loss', drawn);
    const held = store.lines('train/loss').map((l) => l.buf);

    store.setKeys(3, [summary('train/loss', 4, 12)]); // one poll: both runs gained points
    store.setKeys(7, [summary('train/loss', 3, 7)]);
    await vi.waitFor(() => expect(asked).toHaveLength(2));
    expect(asked[1]).toEqual([{ runId: 3, key: 'train/loss', afterStep: 10 }, { runId: 7, key: 'train/loss', afterStep: 5 }]);
    await vi.waitFor(() => expect(steps(store, 'train/loss')).toEqual([[0, 10, 11, 12], [5, 6, 7]]));
    store.lines('train/loss').forEach((l, i) => expect(l.buf).toBe(held[i])); // appended to, not replaced
    expect(drawn).toHaveBeenCalled();

    store.setKeys(7, [summary('train/loss', 3, 7)]); // the same list again: nothing to fetch
    await Promise.resolve();
    expect(asked).toHaveLength(2);
  });

  it('replaces the held copy when the answer is a whole series (more new points than a chart draws)', async () => {
    let whole = [0, 10];
    const { store, asked } = storeWith(({ runId, key }) => answer(runId, key, whole));
    store.setRuns(LINES.slice(0, 1));
    store.setKeys(3, [summary('train/loss', 2, 10)]);
    store.request('train/loss');
    await vi.waitFor(() => expect(store.loaded('train/loss')).toBe(true));

    whole = [0, 500, 1000];
    store.setKeys(3, [summary('train/loss', 3000, 1000)]);
    await vi.waitFor(() => expect(steps(store, 'train/loss')).toEqual([[0, 500, 1000]]));
    expect(asked[1]).toEqual([{ runId: 3, key: 'train/loss', afterStep: 10 }]); // asked for the rest, sent all
  });

  it('after a failed request asks again with the next key list', async () => {
    let fail = true;
    const asked: SeriesWant[][] = [];
    const store = new CompareStore(async (wanted) => {
      asked.push(wanted);
      if (fail) throw new Error('403');
      return wanted.map(({ runId, key }) => answer(runId, key, [0]));
    });
    store.setRuns(LINES.slice(0, 1));
    store.setKeys(3, [summary('train/loss', 1, 0)]);
    store.request('train/loss');
    await vi.waitFor(() => expect(asked).toHaveLength(1));
    await Promise.resolve();
    expect(store.loaded('train/loss')).toBe(false);
    fail = false;
    store.setKeys(3, [summary('train/loss', 1, 0)]);
    await vi.waitFor(() => expect(store.loaded('train/loss')).toBe(true));
    expect(asked).toHaveLength(2);
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
