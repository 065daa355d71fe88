import { describe, expect, it, vi } from 'vitest';
import type { Series } from '../api/types';
import { appendPoints, emptyBuffer, forLog, fromColumns, fromSeries, toNumber, xValues } from './series';
import { MetricStore } from './store';
import { asColumns, live } from './testSeries';

type Point = Series['points'][number];
const series = (key: string, steps: number[], value = (s: number): Point['value'] => s * 2, extra: Partial<Point> = {}): Series => ({
  key,
  total_points: steps.length,
  downsampled: false,
  points: steps.map((step) => {
    const v = value(step);
    const edge = typeof v === 'number' ? v : null;
    return { step, value: v, min: edge, max: edge, count: 1, time: 1000 + step, first_nan_step: v === 'NaN' ? step : null, ...extra };
  }),
});

describe('series helpers', () => {
  it('turns NaN and infinities (sent as strings) into gaps', () => {
    expect(toNumber('NaN')).toBeNull();
    expect(toNumber('Infinity')).toBeNull();
    expect(toNumber(1.5)).toBe(1.5);
  });

  it('keeps where the series was non-finite, including a NaN inside a bucket', () => {
    const buf = fromSeries(series('train/loss', [1, 2, 3, 4], (s) => (s === 2 ? 'Infinity' : s === 4 ? 'NaN' : s)));
    expect(buf.values).toEqual([1, null, 3, null]);
    expect(buf.nonFinite).toEqual([
      { step: 2, at: 1, kind: '+inf' },
      { step: 4, at: 3, kind: 'NaN' },
    ]);
    const bucket = fromSeries({
      key: 'k', total_points: 40, downsampled: true,
      points: [{ step: 19, value: 1, min: 0, max: 'Infinity', count: 20, time: 1, first_nan_step: 7 }],
    });
    expect(bucket.nonFinite).toEqual([{ step: 7, at: 0, kind: 'NaN' }, { step: 19, at: 0, kind: '+inf' }]);
    expect(bucket.downsampled).toBe(true);
    expect(bucket.maxs).toEqual([null]);
  });

  it('reads a series that is not downsampled from its steps, values and times alone', () => {
    const odd: Record<number, Point['value']> = { 2: 'Infinity', 3: '-Infinity', 4: 'NaN' };
    const raw = series('train/loss', [1, 2, 3, 4, 5], (s) => odd[s] ?? s);
    const columns = asColumns(raw);
    expect(columns.min).toBeUndefined(); // as the API sends it
    expect(fromColumns(columns)).toEqual(fromSeries(raw));
    const bucketed = { ...raw, downsampled: true, points: raw.points.map((p) => ({ ...p, min: 0, max: 9, count: 3 })) };
    expect(fromColumns(asColumns(bucketed))).toEqual(fromSeries(bucketed));
  });

  it('appends only points past the last step, in step order', () => {
    const buf = fromSeries(series('train/loss', [1, 2, 3]));
    // step 3 overlaps the fetched history
    const added = appendPoints(buf, { step: [5, 3, 4], value: [10, 99, 'NaN'], time: [1005, 1003, 1004] });
    expect(added).toBe(2);
    expect(buf.steps).toEqual([1, 2, 3, 4, 5]);
    expect(buf.values).toEqual([2, 4, 6, null, 10]);
    expect(buf.nonFinite).toEqual([{ step: 4, at: 3, kind: 'NaN' }]);
  });

  it('blanks non-positive values on a log axis and keeps time monotonic', () => {
    const buf = { ...emptyBuffer(), steps: [1, 2, 3], times: [10, 9, 11], values: [0, -1, 2] };
    expect(forLog(buf.values, true)).toEqual([null, null, 2]);
    expect(xValues(buf, 'time')).toEqual([10, 10, 11]);
    expect(xValues(buf, 'step')).toBe(buf.steps);
  });
});

const summary = (key: string, count: number, last: number) => ({ key, count, last_step: last, last_value: last, last_time: 1 });

describe('MetricStore', () => {
  it('fetches only the keys charts ask for, batched, and holds live points that arrive meanwhile', async () => {
    const fetched: string[][] = [];
    let answer: (s: Series[]) => void = () => {};
    const store = new MetricStore((keys) => {
      fetched.push(keys);
      return new Promise((resolve) => (answer = (s) => resolve(s.map(asColumns))));
    });
    store.setKeyList([summary('train/loss', 4, 4), summary('train/lr', 3, 4), summary('other/x', 2, 4)]);
    expect(store.keys().map((k) => k.key)).toEqual(['train/loss', 'train/lr', 'other/x']);
    store.request('train/loss');
    store.request('train/lr');
    await vi.waitFor(() => expect(fetched).toEqual([['train/loss', 'train/lr']]));
    store.append([live('train/loss', 5), live('other/x', 5)]);
    let redraws = 0;
    store.subscribe('train/loss', () => redraws++);
    answer([series('train/loss', [1, 2, 3, 4]), series('train/lr', [1, 2, 3, 4])]);
    await vi.waitFor(() => expect(store.get('train/loss')?.steps).toEqual([1, 2, 3, 4, 5]));
    expect(redraws).toBe(1);
    expect(store.loaded('other/x')).toBe(false); // never on screen: never fetched
    store.append([live('train/loss', 6)]);
    expect(store.get('train/loss')?.steps.at(-1)).toBe(6);
    expect(redraws).toBe(2);
  });

  it('announces a key it has not seen', () => {
    const store = new MetricStore(async () => []);
    store.setKeyList([]);
    let announced = 0;
    store.subscribeKeys(() => announced++);
    store.append([live('reward/mean', 1)]);
    expect(announced).toBe(1);
    expect(store.keys().map((k) => k.key)).toEqual(['reward/mean']);
  });

  it('waits while held (the early answer may bring everything), then fetches only what it lacks', async () => {
    const fetched: string[][] = [];
    const store = new MetricStore(async (keys) => (fetched.push(keys), []));
    store.hold();
    store.setKeyList([summary('a', 2, 2), summary('b', 2, 2)]);
    store.request('a');
    store.request('b');
    store.load([series('a', [1, 2])]);
    await new Promise((r) => setTimeout(r, 5));
    expect(fetched).toEqual([]);
    store.release();
    await vi.waitFor(() => expect(fetched).toEqual([['b']]));
  });

  it('fetches a key with its candidate twins and folds the identical one into the first', async () => {
    const data: Record<string, Series> = {
      'reward/mean': series('reward/mean', [1, 2, 3], (s) => s / 10),
      'reward/arithmetic': series('reward/arithmetic', [1, 2, 3], (s) => s / 10),
    };
    const store = new MetricStore(async (keys) => keys.map((k) => asColumns(data[k]!)));
    store.setKeyList([{ ...summary('reward/mean', 3, 3), last_value: 0.3 }, { ...summary('reward/arithmetic', 3, 3), last_value: 0.3 }]);
    store.request('reward/mean');
    await vi.waitFor(() => expect(store.duplicates()).toEqual(new Map([['reward/arithmetic', 'reward/mean']])));
  });
});
