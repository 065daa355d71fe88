import type { Series } from '../../api/types';
import { ema } from '../../charts/ema';
import { toNumber } from '../../charts/series';

/** One metric from several runs on a shared x: what a multi-series uPlot needs. */
export interface Aligned {
  steps: number[];
  /** One column per run, `null` where that run has no point at the step. */
  values: Array<Array<number | null>>;
}

/** A run's points by step; a run without the key is `undefined` and gives an all-gap column. */
export type RunPoints = ReadonlyArray<{ step: number; value: unknown }> | undefined;

/**
 * Aligns runs on the sorted union of their steps. Steps a run lacks are `null`, and the chart
 * draws with spanGaps so each run's line still connects across the other runs' steps.
 * NaN, infinities and their string spellings become gaps too.
 */
export function alignRuns(runs: readonly RunPoints[]): Aligned {
  const stepSet = new Set<number>();
  for (const points of runs) for (const p of points ?? []) stepSet.add(p.step);
  const steps = [...stepSet].sort((a, b) => a - b);
  const index = new Map(steps.map((s, i) => [s, i]));
  const values = runs.map((points) => {
    const column: Array<number | null> = new Array<number | null>(steps.length).fill(null);
    for (const p of points ?? []) column[index.get(p.step)!] = toNumber(p.value as number | null);
    return column;
  });
  return { steps, values };
}

/** Log axes cannot show zero or negatives; blank them, then smooth each run on its own points. */
export function shapeForChart(aligned: Aligned, smoothing: number, logScale: boolean): Array<Array<number | null>> {
  return [
    aligned.steps,
    ...aligned.values.map((column) =>
      ema(logScale ? column.map((v) => (v != null && v > 0 ? v : null)) : column, smoothing),
    ),
  ];
}

/** key → each run's series for it (in run order), over every key any run has. */
export function seriesByKey(perRun: ReadonlyArray<readonly Series[] | undefined>): Map<string, Array<Series | undefined>> {
  const keys = new Set<string>();
  for (const series of perRun) for (const s of series ?? []) keys.add(s.key);
  const out = new Map<string, Array<Series | undefined>>();
  for (const key of keys) out.set(key, perRun.map((series) => series?.find((s) => s.key === key)));
  return out;
}

/** How many runs have at least one point for the key: the chart's `data-series`. */
export function runsWithData(series: ReadonlyArray<Series | undefined>): number {
  return series.filter((s) => s != null && s.points.length > 0).length;
}
