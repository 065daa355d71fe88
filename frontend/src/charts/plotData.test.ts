import { describe, expect, it } from 'vitest';
import type { Series } from '../api/types';
import { describeNonFinite, markSpans } from './nonFinite';
import { buildPlot } from './plotData';
import { plotOptions } from './plotOptions';
import { fromSeries } from './series';
import { smoothingFor } from './smoothing';

type Value = Series['points'][number]['value'];
const series = (key: string, points: Array<[number, Value]>, downsampled = false): Series => ({
  key, total_points: points.length, downsampled,
  points: points.map(([step, value]) => {
    const edge = typeof value === 'number' ? value : null;
    return { step, value, min: edge, max: edge, count: 1, time: step, first_nan_step: value === 'NaN' ? step : null };
  }),
});
const line = (s: Series, label = s.key, color = 'var(--chart-line)') => ({ label, color, buf: fromSeries(s) });

describe('smoothing', () => {
  it('leaves eval/loss raw: 0.595 at step 250, not an average dragged toward the first eval', () => {
    const evalLoss = series('eval/loss', [[0, 4.1], [250, 0.595], [500, 0.52], [750, 0.47]]);
    const plot = buildPlot(evalLoss.key, [line(evalLoss)], 'step', false, 0.6);
    expect(plot.lines[0]!.smoothed).toBe(false);
    expect(plot.data).toHaveLength(2); // x and the raw line: nothing smoothed drawn over it
    expect(plot.data[1]![1]).toBe(0.595);
  });

  it('keeps the learning-rate warmup peak at its step', () => {
    const lr = series('train/lr', Array.from({ length: 200 }, (_, s) => [s, s <= 5 ? s / 5 : 1 - s / 400] as [number, number]));
    const plot = buildPlot(lr.key, [line(lr)], 'step', false, 0.6);
    const values = plot.data[plot.data.length - 1] as number[];
    expect(values.indexOf(Math.max(...values))).toBe(5);
  });

  it('smooths a dense series as a second line next to the raw one, which stays the prominent one', () => {
    const loss = series('train/loss', Array.from({ length: 100 }, (_, s) => [s, (s % 2) * 2] as [number, number]));
    const plot = buildPlot(loss.key, [line(loss)], 'step', false, 0.6);
    expect(plot.data).toHaveLength(3);
    expect(plot.data[1]).toEqual(fromSeries(loss).values);
    const opts = plotOptions(plot.lines, env());
    expect(opts.series.map((s) => [s.label, s.width, s.dash])).toEqual([['step', undefined, undefined], ['value', 1.5, undefined], ['smoothed', 1.5, [6, 4]]]);
  });

  it('counts any key with few points as sparse', () => {
    expect(smoothingFor('train/loss', 10, 0.6)).toBe(0);
    expect(smoothingFor('train/loss', 500, 0.6)).toBe(0.6);
    expect(smoothingFor('optim/learning_rate', 500, 0.6)).toBe(0);
  });
});

describe('several runs on one chart (Compare)', () => {
  it('draws each run raw and smoothed; a step a run lacks is joined over, a NaN is a gap', () => {
    const a = series('train/loss', Array.from({ length: 60 }, (_, s) => [s * 2, s === 10 ? 'NaN' : s] as [number, Value]));
    const b = series('train/loss', Array.from({ length: 60 }, (_, s) => [s * 2 + 1, s] as [number, number]));
    const plot = buildPlot('train/loss', [line(a, '#1 a', 'var(--series-0)'), line(b, '#2 b', 'var(--series-1)')], 'step', false, 0.6);
    expect(plot.lines.map((l) => [l.label, l.smoothed])).toEqual([['#1 a', true], ['#2 b', true]]);
    expect(plot.data).toHaveLength(5);
    expect(plot.data[0]!.slice(0, 3)).toEqual([0, 1, 2]);
    expect(plot.data[1]!.slice(0, 3)).toEqual([0, undefined, 1]);
    expect(plot.data[1]![20]).toBeNull();
    const labels = plotOptions(plot.lines, env()).series.map((s) => s.label);
    expect(labels).toEqual(['step', '#1 a', '#1 a smoothed', '#2 b', '#2 b smoothed']);
  });

  it('leaves a short run raw beside a long one, as its own page draws it', () => {
    const short = series('train/loss', Array.from({ length: 25 }, (_, s) => [s, s % 2] as [number, number]));
    const long = series('train/loss', Array.from({ length: 100 }, (_, s) => [s, s % 2] as [number, number]));
    const plot = buildPlot('train/loss', [line(short, '#1 short'), line(long, '#2 long')], 'step', false, 0.6);
    expect(plot.lines.map((l) => [l.label, l.smoothed])).toEqual([['#1 short', false], ['#2 long', true]]);
    expect(plot.data).toHaveLength(4); // x, the short run raw, the long run raw and smoothed
    expect(plot.data[1]!.slice(0, 4)).toEqual([0, 1, 0, 1]);
  });
});

describe('downsampled series', () => {
  it('get their bucket min/max as a band', () => {
    const s: Series = {
      key: 'k', total_points: 4000, downsampled: true,
      points: [
        { step: 1999, value: 1, min: 0, max: 50, count: 2000, time: 1, first_nan_step: null },
        { step: 3999, value: 2, min: 1, max: 3, count: 2000, time: 2, first_nan_step: null },
      ],
    };
    const plot = buildPlot(s.key, [line(s)], 'step', false, 0);
    expect(plot.lines[0]!.band).toBe(true);
    expect(plot.data.slice(2)).toEqual([[50, 3], [0, 1]]);
    const opts = plotOptions(plot.lines, env());
    expect(opts.bands).toEqual([{ series: [2, 3], fill: 'resolved(var(--chart-band))' }]);
  });
});

describe('non-finite points', () => {
  it('say since when a series is NaN, or where it was', () => {
    const tail = fromSeries(series('k', [[1, 1], [2, 2], [3, 'NaN'], [4, 'NaN']]));
    expect(describeNonFinite(tail)).toBe('NaN from step 3');
    expect(markSpans(tail, tail.steps)).toEqual([{ x0: 3, x1: 4, open: true, kind: 'NaN' }]);
    expect(describeNonFinite(fromSeries(series('k', [[1, 'NaN'], [2, 'NaN']])))).toBe('NaN from step 1');
    const spike = fromSeries(series('k', [[1, 1], [2, 'Infinity'], [3, 1]]));
    expect(describeNonFinite(spike)).toBe('+inf at step 2');
    expect(markSpans(spike, spike.steps)).toEqual([{ x0: 2, x1: 2, open: false, kind: '+inf' }]);
    const mixed = fromSeries(series('k', [[1, 'NaN'], [2, 1], [3, '-Infinity'], [4, 'NaN']]));
    expect(describeNonFinite(mixed)).toBe('NaN/inf from step 3 (first at step 1)');
    expect(describeNonFinite(fromSeries(series('k', [[1, 1]])))).toBeNull();
  });
});

function env() {
  return {
    width: 400, height: 200, xBy: 'step' as const, logScale: false, color: (c: string) => `resolved(${c})`,
    spans: () => [], ticks: [[], []] as [string[], string[]], onZoom: () => {},
  };
}
