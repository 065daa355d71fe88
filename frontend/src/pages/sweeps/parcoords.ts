import { metricNumber, type SweepDetail, type Trial } from '../../api/sweeps';
import { formatNumber, formatTicks } from '../../lib/format';
import { formatParam, paramKey, searchedPaths } from './values';

/*
 * The parallel-coordinates view as plain data: one vertical axis per searched path plus one for the metric, and
 * one line per trial with a value. Each axis places a value at u in [0, 1] (0 its bottom, 1 its top); the
 * component only draws what this returns.
 */

export interface Tick {
  u: number;
  label: string;
}

export interface Axis {
  path: string;
  /** Under the name: "log", or the metric's goal. */
  note: string | null;
  ticks: Tick[];
  /** Where a value sits; null where it cannot (not a choice, not a number). */
  place: (value: unknown) => number | null;
}

export interface Line {
  trial: Trial;
  /** One point per axis that could place the trial's value, in axis order. */
  points: Array<{ axis: number; u: number }>;
  /** 0 the best value of the sweep, 1 the worst (and any NaN or infinity). */
  badness: number;
  /** Pruned, failed or cancelled: drawn faint. */
  faint: boolean;
  best: boolean;
}

const clamp01 = (u: number) => Math.min(1, Math.max(0, u));

function numericAxis(path: string, low: number, high: number, log: boolean): Axis {
  const [from, to] = log ? [Math.log(low), Math.log(high)] : [low, high];
  const at = (v: number) => clamp01(((log ? Math.log(v) : v) - from) / (to - from));
  const place = (value: unknown) => (typeof value === 'number' && Number.isFinite(value) && (!log || value > 0) ? at(value) : null);
  // Log: the ends and the powers of ten between (at most four); linear: the ends and the middle.
  let values = [low, (low + high) / 2, high];
  if (log) {
    const decades = [];
    for (let e = Math.ceil(Math.log10(low)); e <= Math.floor(Math.log10(high)); e++) decades.push(10 ** e);
    values = [low, ...(decades.length <= 4 ? decades.filter((d) => d > low * 1.2 && d < high / 1.2) : []), high];
  }
  const labels = formatTicks(values, log);
  return { path, note: log ? 'log' : null, place, ticks: values.map((v, i) => ({ u: at(v), label: labels[i]! })) };
}

const MAX_CHOICE_LABELS = 12;

function categoricalAxis(path: string, choices: readonly unknown[]): Axis {
  const index = new Map(choices.map((c, i) => [paramKey(c), i]));
  const at = (i: number) => (choices.length === 1 ? 0.5 : i / (choices.length - 1));
  const every = Math.ceil(choices.length / MAX_CHOICE_LABELS);
  const ticks = choices.map((c, i) => ({ u: at(i), label: i % every === 0 || i === choices.length - 1 ? formatParam(c) : '' }));
  return {
    path,
    note: null,
    ticks,
    place: (value) => {
      const i = index.get(paramKey(value));
      return i == null ? null : at(i);
    },
  };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** A path's axis from its space entry ({type: float|int, low, high, log} or {type: categorical, choices}). */
export function paramAxis(path: string, param: unknown, observed: readonly unknown[]): Axis {
  if (isObject(param)) {
    const { type, low, high, log, choices } = param;
    if ((type === 'float' || type === 'int') && isNumber(low) && isNumber(high) && low < high) {
      return numericAxis(path, low, high, log === true && low > 0);
    }
    if (type === 'categorical' && Array.isArray(choices) && choices.length > 0) return categoricalAxis(path, choices);
  }
  // An entry this dashboard does not know: the values the trials took, as numbers if all are, else as choices.
  if (observed.length > 0 && observed.every(isNumber)) {
    const [low, high] = [Math.min(...observed), Math.max(...observed)];
    if (low < high) return numericAxis(path, low, high, false);
  }
  const seen = new Map(observed.map((v) => [paramKey(v), v]));
  return categoricalAxis(path, [...seen.values()]);
}

/** Room kept at the metric axis' worst end for NaN and the infinities, which no scale can place. */
const NON_FINITE_GAP = 0.12;

/**
 * The metric's axis, larger values up: its finite values span it, and any NaN or infinity sits in a slot past
 * its worst end (the top when the goal is min, the bottom when it is max).
 */
export function metricAxis(metric: string, goal: SweepDetail['goal'], values: readonly number[]): Axis & { badness: (v: number) => number } {
  const finite = values.filter(Number.isFinite);
  const nonFinite = finite.length < values.length;
  const [lo, hi] = finite.length ? [Math.min(...finite), Math.max(...finite)] : [0, 0];
  const slot = goal === 'min' ? 1 : 0;
  // The finite values' stretch of the axis, leaving the slot when one is needed.
  const [bottom, top] = !nonFinite ? [0, 1] : goal === 'min' ? [0, 1 - NON_FINITE_GAP] : [NON_FINITE_GAP, 1];
  const fraction = (v: number) => (hi > lo ? (v - lo) / (hi - lo) : 0.5);
  const at = (v: number) => (Number.isFinite(v) ? bottom + (top - bottom) * fraction(v) : slot);
  const numbers = hi > lo ? [lo, (lo + hi) / 2, hi] : finite.length ? [lo] : [];
  const labels = hi > lo ? formatTicks(numbers) : numbers.map((v) => formatNumber(v));
  const ticks = numbers.map((v, i) => ({ u: at(v), label: labels[i]! }));
  if (nonFinite) ticks.push({ u: slot, label: 'NaN/inf' });
  return {
    path: metric,
    note: goal,
    ticks,
    place: (value) => (typeof value === 'number' ? at(value) : null),
    badness: (v) => (!Number.isFinite(v) ? 1 : hi > lo ? (goal === 'min' ? fraction(v) : 1 - fraction(v)) : 0),
  };
}

const FAINT: ReadonlySet<Trial['state']> = new Set(['pruned', 'failed', 'cancelled']);

/** Axes for every searched path then the metric, and a line per trial with a value: faint ones first, then worst to best, the best last (on top). */
export function parallelModel(sweep: Pick<SweepDetail, 'space' | 'trial_list' | 'metric' | 'goal' | 'best'>): { axes: Axis[]; lines: Line[] } {
  const valued = sweep.trial_list.filter((t) => metricNumber(t.value) != null);
  const value = (t: Trial) => metricNumber(t.value)!;
  const params = searchedPaths(sweep).map((path) =>
    paramAxis(path, sweep.space[path], sweep.trial_list.map((t) => t.params[path]).filter((v) => v !== undefined)),
  );
  const metric = metricAxis(sweep.metric, sweep.goal, valued.map(value));
  const axes = [...params, metric];
  const lines = valued.map((trial): Line => {
    const points = axes.flatMap((axis, i) => {
      const u = axis.place(axis === metric ? value(trial) : trial.params[axis.path]);
      return u == null ? [] : [{ axis: i, u }];
    });
    return { trial, points, badness: metric.badness(value(trial)), faint: FAINT.has(trial.state), best: trial.number === sweep.best?.number };
  });
  const rank = (l: Line) => (l.best ? 2 : l.faint ? 0 : 1);
  lines.sort((a, b) => rank(a) - rank(b) || b.badness - a.badness || a.trial.number - b.trial.number);
  return { axes, lines };
}

/** Best to worst: blue, violet, orange, readable on the light and the dark theme alike. */
export const VALUE_COLORS = ['#3a7fd5', '#9a5fc4', '#e0692a'] as const;

export function valueColor(badness: number): string {
  const t = clamp01(badness) * (VALUE_COLORS.length - 1);
  const i = Math.min(Math.floor(t), VALUE_COLORS.length - 2);
  const [from, to] = [VALUE_COLORS[i]!, VALUE_COLORS[i + 1]!].map((hex) => [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16)));
  const mix = from!.map((c, k) => Math.round(c + (to![k]! - c) * (t - i)));
  return `rgb(${mix.join(', ')})`;
}
