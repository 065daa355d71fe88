import type { Series } from '../api/types';

/** One metric's points in columns, the shape uPlot draws without copying. */
export interface SeriesBuffer {
  steps: number[];
  times: number[];
  values: Array<number | null>;
}

/** The API sends NaN and infinities as strings; a chart shows them as gaps. */
export function toNumber(value: number | string | null | undefined): number | null {
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  return null;
}

export function fromSeries(series: Series): SeriesBuffer {
  const buf: SeriesBuffer = { steps: [], times: [], values: [] };
  for (const p of series.points) {
    buf.steps.push(p.step);
    buf.times.push(p.time);
    buf.values.push(toNumber(p.value));
  }
  return buf;
}

/**
 * Appends live points past the buffer's last step, in step order. Points at or before it are
 * already drawn (the initial fetch and the live stream overlap), so they are dropped.
 * Returns how many were added.
 */
export function appendPoints(
  buf: SeriesBuffer,
  points: ReadonlyArray<{ step: number; value: number | string; time: number }>,
): number {
  const sorted = points.length > 1 ? [...points].sort((a, b) => a.step - b.step) : points;
  let added = 0;
  for (const p of sorted) {
    const last = buf.steps.length ? buf.steps[buf.steps.length - 1]! : -Infinity;
    if (p.step <= last) continue;
    buf.steps.push(p.step);
    buf.times.push(p.time);
    buf.values.push(toNumber(p.value));
    added++;
  }
  return added;
}

export interface ChartOptions {
  xBy: 'step' | 'time';
  logScale: boolean;
}

/** Log axes cannot show zero or negatives; blank them rather than let uPlot throw. */
export function yValues(buf: SeriesBuffer, logScale: boolean): Array<number | null> {
  return logScale ? buf.values.map((v) => (v != null && v > 0 ? v : null)) : buf.values;
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
