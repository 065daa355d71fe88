import type { components } from '../api/schema';
import type { Series } from '../api/types';

/** A series as one list per field (GET /metrics/columns): what charts fetch. */
export type SeriesColumns = components['schemas']['SeriesColumns'];

/** Where a series was NaN or infinite: drawn as a marker, never silently dropped. */
export interface NonFinite {
  step: number;
  /** Index of the point (or bucket) in the buffer, for its time on a time axis. */
  at: number;
  kind: 'NaN' | '+inf' | '-inf';
}

/** One metric's points in columns, the shape uPlot draws without copying. */
export interface SeriesBuffer {
  steps: number[];
  times: number[];
  values: Array<number | null>;
  /** Each bucket's smallest and largest finite value (the value itself for a raw point). */
  mins: Array<number | null>;
  maxs: Array<number | null>;
  nonFinite: NonFinite[];
  /** The server merged points into buckets: the chart draws their min/max as a band. */
  downsampled: boolean;
}

export const emptyBuffer = (): SeriesBuffer => ({
  steps: [], times: [], values: [], mins: [], maxs: [], nonFinite: [], downsampled: false,
});

/** The API sends NaN and infinities as strings; on the line they are gaps (and get a marker). */
export function toNumber(value: number | string | null | undefined): number | null {
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  return null;
}

function kindOf(value: number | string | null | undefined): NonFinite['kind'] | null {
  if (value === 'NaN' || (typeof value === 'number' && Number.isNaN(value))) return 'NaN';
  if (value === 'Infinity' || value === Infinity) return '+inf';
  if (value === '-Infinity' || value === -Infinity) return '-inf';
  return null;
}

type Value = Series['points'][number]['value'];
type Edge = Series['points'][number]['min'];

function push(buf: SeriesBuffer, step: number, time: number, value: Value, min: Edge, max: Edge, firstNan: number | null | undefined) {
  const at = buf.steps.length;
  buf.steps.push(step);
  buf.times.push(time);
  buf.values.push(toNumber(value));
  buf.mins.push(toNumber(min));
  buf.maxs.push(toNumber(max));
  // A bucket's value is its last point; a NaN or infinity earlier in it shows in first_nan_step, min and max.
  const kind = kindOf(value);
  if (firstNan != null) buf.nonFinite.push({ step: firstNan, at, kind: 'NaN' });
  else if (kind === 'NaN') buf.nonFinite.push({ step, at, kind });
  if (kind && kind !== 'NaN') buf.nonFinite.push({ step, at, kind });
  if (!kind && kindOf(max) === '+inf') buf.nonFinite.push({ step, at, kind: '+inf' });
  if (!kind && kindOf(min) === '-inf') buf.nonFinite.push({ step, at, kind: '-inf' });
}

export function fromSeries(series: Series): SeriesBuffer {
  const buf = emptyBuffer();
  buf.downsampled = series.downsampled;
  for (const p of series.points) push(buf, p.step, p.time, p.value, p.min, p.max, p.first_nan_step);
  buf.nonFinite.sort((a, b) => a.step - b.step);
  return buf;
}

/** A series that is not downsampled comes without min, max and first_nan_step: each point is its own bucket. */
export function fromColumns(c: SeriesColumns): SeriesBuffer {
  const buf = emptyBuffer();
  buf.downsampled = c.downsampled;
  const { min, max, first_nan_step: firstNan } = c;
  if (min && max && firstNan) {
    for (let i = 0; i < c.step.length; i++) push(buf, c.step[i]!, c.time[i]!, c.value[i]!, min[i]!, max[i]!, firstNan[i]);
  } else {
    for (let i = 0; i < c.step.length; i++) {
      const value = c.value[i]!;
      const edge = value === 'NaN' ? null : value;
      push(buf, c.step[i]!, c.time[i]!, value, edge, edge, null);
    }
  }
  buf.nonFinite.sort((a, b) => a.step - b.step);
  return buf;
}

/** Points as columns, index for index: a live message's points of one key. */
export interface PointColumns {
  step: readonly number[];
  value: ReadonlyArray<number | string>;
  time: readonly number[];
}

/**
 * Appends live points past the buffer's last step, in step order. Points at or before it are
 * already drawn (the initial fetch and the live stream overlap), so they are dropped.
 * Returns how many were added.
 */
export function appendPoints(buf: SeriesBuffer, points: PointColumns): number {
  const order = [...points.step.keys()];
  if (order.length > 1) order.sort((a, b) => points.step[a]! - points.step[b]!);
  let added = 0;
  for (const i of order) {
    const step = points.step[i]!;
    const last = buf.steps.length ? buf.steps[buf.steps.length - 1]! : -Infinity;
    if (step <= last) continue;
    const value = toNumber(points.value[i]!);
    const kind = kindOf(points.value[i]!);
    if (kind) buf.nonFinite.push({ step, at: buf.steps.length, kind });
    buf.steps.push(step);
    buf.times.push(points.time[i]!);
    buf.values.push(value);
    buf.mins.push(value);
    buf.maxs.push(value);
    added++;
  }
  return added;
}

/** Log axes cannot show zero or negatives; blank them rather than let uPlot throw. */
export function forLog<T extends number | null | undefined>(values: readonly T[], logScale: boolean): T[] {
  return logScale ? values.map((v) => (v != null && v > 0 ? v : (null as T))) : (values as T[]);
}

/** Time-x charts need increasing x; a resumed run can log an old step later, so keep order by step but clamp time. */
export function xValues(buf: SeriesBuffer, xBy: 'step' | 'time'): number[] {
  if (xBy === 'step') return buf.steps;
  const xs: number[] = new Array(buf.times.length);
  let prev = -Infinity;
  for (let i = 0; i < buf.times.length; i++) {
    prev = Math.max(prev, buf.times[i]!);
    xs[i] = prev;
  }
  return xs;
}
