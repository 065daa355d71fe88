import { describe, expect, it } from 'vitest';
import { sweepDetail, sweepTrial } from '../../test/fixtures';
import { metricAxis, parallelModel, paramAxis, valueColor, VALUE_COLORS } from './parcoords';

const ticks = (axis: { ticks: Array<{ u: number; label: string }> }) => axis.ticks.map((t) => `${t.label}@${+t.u.toFixed(3)}`);

describe('paramAxis', () => {
  it('log-scales a float range when the space says log: 1e-4 halfway between 1e-5 and 1e-3, ticks at the decades', () => {
    const axis = paramAxis('train.lr', { type: 'float', low: 1e-5, high: 1e-3, log: true }, []);
    expect(axis.place(1e-4)).toBeCloseTo(0.5);
    expect(axis.place(1e-5)).toBe(0);
    expect(axis.place(1e-3)).toBe(1);
    expect(axis.note).toBe('log');
    expect(ticks(axis)).toEqual(['0.00001@0', '0.0001@0.5', '0.001@1']); // the charts' tick style
  });

  it('spaces a linear range evenly by value, int or float, and clamps what lies outside', () => {
    const axis = paramAxis('train.warmup_steps', { type: 'int', low: 0, high: 50, step: 10, log: false }, []);
    expect(axis.place(10)).toBeCloseTo(0.2);
    expect(axis.place(80)).toBe(1);
    expect(axis.place('ten')).toBeNull();
    expect(axis.note).toBeNull();
    expect(ticks(axis)).toEqual(['0@0', '25@0.5', '50@1']);
    expect(paramAxis('x', { type: 'float', low: 0, high: 2 }, []).place(0.5)).toBeCloseTo(0.25);
  });

  it('spaces categorical choices evenly in the order given, whatever their values, and finds them by value', () => {
    const axis = paramAxis('train.batch_size', { type: 'categorical', choices: [8, 16, 128] }, []);
    expect([8, 16, 128].map((c) => axis.place(c))).toEqual([0, 0.5, 1]);
    expect(axis.place(32)).toBeNull();
    expect(axis.place('16')).toBeNull(); // a string is not the number
    expect(ticks(axis)).toEqual(['8@0', '16@0.5', '128@1']);
    const mixed = paramAxis('opt', { type: 'categorical', choices: ['adamw', null, [1, 2]] }, []);
    expect(mixed.place([1, 2])).toBe(1);
    expect(mixed.place(null)).toBe(0.5);
    expect(paramAxis('one', { type: 'categorical', choices: ['only'] }, []).place('only')).toBe(0.5);
  });

  it('falls back on the values the trials took for an entry it does not know', () => {
    expect(paramAxis('x', { type: 'fancy' }, [3, 1, 2]).place(2)).toBeCloseTo(0.5);
    const labels = paramAxis('y', undefined, ['b', 'a', 'b']);
    expect(ticks(labels)).toEqual(['b@0', 'a@1']);
  });
});

describe('metricAxis', () => {
  it('spans the finite values, larger up, with badness 0 at the best end', () => {
    const min = metricAxis('eval/loss', 'min', [0.5, 1, 1.5]);
    expect(min.place(0.5)).toBe(0);
    expect(min.place(1.5)).toBe(1);
    expect(min.badness(0.5)).toBe(0);
    expect(min.badness(1.5)).toBe(1);
    const max = metricAxis('eval/acc', 'max', [0.5, 1, 1.5]);
    expect(max.badness(1.5)).toBe(0);
    expect(max.badness(0.5)).toBe(1);
  });

  it('keeps a slot for NaN and the infinities past the worst end: the top for min, the bottom for max', () => {
    const min = metricAxis('eval/loss', 'min', [0, 1, NaN]);
    expect(min.place(NaN)).toBe(1);
    expect(min.place(Infinity)).toBe(1);
    expect(min.place(1)).toBeLessThan(1);
    expect(min.badness(NaN)).toBe(1);
    expect(min.ticks.at(-1)).toEqual({ u: 1, label: 'NaN/inf' });
    const max = metricAxis('eval/acc', 'max', [0, 1, -Infinity]);
    expect(max.place(-Infinity)).toBe(0);
    expect(max.place(0)).toBeGreaterThan(0);
    expect(max.place(1)).toBe(1);
  });

  it('puts a single value in the middle', () => {
    const axis = metricAxis('eval/loss', 'min', [0.7]);
    expect(axis.place(0.7)).toBe(0.5);
    expect(ticks(axis)).toEqual(['0.7@0.5']);
  });
});

describe('parallelModel', () => {
  it('has an axis per searched path then the metric, and a line per trial with a value: faint first, worst to best, the best last', () => {
    const { axes, lines } = parallelModel(sweepDetail());
    expect(axes.map((a) => a.path)).toEqual(['train.lr', 'train.batch_size', 'train.warmup_steps', 'eval/loss']);
    expect(lines.map((l) => [l.trial.number, l.faint, l.best])).toEqual([
      [4, true, false],
      [1, false, false],
      [3, false, true],
    ]);
    const best = lines.at(-1)!;
    expect(best.badness).toBe(0);
    expect(best.points.map((p) => p.axis)).toEqual([0, 1, 2, 3]);
    expect(best.points[1]!.u).toBe(0); // batch size 8, the first choice
    expect(best.points[2]!.u).toBe(1); // 50 warm-up steps, the top of 0..50
    expect(lines[0]!.badness).toBe(1); // 1.7, the worst value
  });

  it('leaves out a point it cannot place rather than the trial', () => {
    const trial = sweepTrial(1, { 'train.lr': 1e-4, 'train.batch_size': 64, 'train.warmup_steps': 0 }, { value: 1 });
    const { lines } = parallelModel(sweepDetail({ trial_list: [trial], best: trial }));
    expect(lines[0]!.points.map((p) => p.axis)).toEqual([0, 2, 3]);
  });
});

describe('valueColor', () => {
  it('runs from the best colour to the worst', () => {
    expect(valueColor(0)).toBe('rgb(58, 127, 213)');
    expect(valueColor(1)).toBe('rgb(224, 105, 42)');
    expect(valueColor(0.5)).toBe('rgb(154, 95, 196)');
    expect(VALUE_COLORS).toHaveLength(3);
  });
});
