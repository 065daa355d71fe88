import { describe, expect, it } from 'vitest';
import { appendPoints, fromSeries, toNumber, xValues, yValues } from './series';
import { MetricStore } from './store';

const series = (key: string, steps: number[]) => ({
  key,
  total_points: steps.length,
  downsampled: false,
  points: steps.map((step) => ({ step, value: step * 2, min: step * 2, max: step * 2, count: 1, time: 1000 + step })),
});

describe('series helpers', () => {
  it('turns NaN and infinities (sent as strings) into gaps', () => {
    expect(toNumber('NaN')).toBeNull();
    expect(toNumber('Infinity')).toBeNull();
    expect(toNumber(1.5)).toBe(1.5);
  });

  it('appends only points past the last step, in step order', () => {
    const buf = fromSeries(series('train/loss', [1, 2, 3]));
    const added = appendPoints(buf, [
      { step: 5, value: 10, time: 1005 },
      { step: 3, value: 99, time: 1003 }, // overlap with the fetched history
      { step: 4, value: 'NaN', time: 1004 },
    ]);
    expect(added).toBe(2);
    expect(buf.steps).toEqual([1, 2, 3, 4, 5]);
    expect(buf.values).toEqual([2, 4, 6, null, 10]);
  });

  it('blanks non-positive values on a log axis and keeps time monotonic', () => {
    const buf = { steps: [1, 2, 3], times: [10, 9, 11], values: [0, -1, 2] };
    expect(yValues(buf, true)).toEqual([null, null, 2]);
    expect(xValues(buf, 'time')).toEqual([10, 10, 11]);
    expect(xValues(buf, 'step')).toBe(buf.steps);
  });
});

describe('MetricStore', () => {
  it('holds live points that arrive before the history, then merges them', () => {
    const store = new MetricStore();
    let redraws = 0;
    store.append([{ key: 'train/loss', step: 4, value: 1, time: 1 }]);
    store.load([series('train/loss', [1, 2, 3, 4])]);
    store.subscribe('train/loss', () => redraws++);
    expect(store.get('train/loss')?.steps).toEqual([1, 2, 3, 4]);
    store.append([{ key: 'train/loss', step: 5, value: 1, time: 2 }]);
    expect(store.get('train/loss')?.steps).toEqual([1, 2, 3, 4, 5]);
    expect(redraws).toBe(1);
  });

  it('announces a key it has not seen', () => {
    const store = new MetricStore();
    store.load([]);
    let announced = 0;
    store.subscribeKeys(() => announced++);
    store.append([{ key: 'reward/mean', step: 1, value: 1, time: 1 }]);
    expect(announced).toBe(1);
    expect(store.keys()).toEqual(['reward/mean']);
  });
});
