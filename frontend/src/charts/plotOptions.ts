import type uPlot from 'uplot';
import { formatNumber, formatStepTicks, formatTicks } from '../lib/format';
import { AXIS_FONT, STEP_INCRS, xRange, yAxisSize, yRange } from './axes';
import { drawMarks, type MarkSpan } from './nonFinite';
import type { PlotLine } from './plotData';

export interface PlotEnv {
  width: number;
  height: number;
  xBy: 'step' | 'time';
  logScale: boolean;
  /** Resolves a colour (`var(--name)` against the current theme). */
  color: (css: string) => string;
  /** The current non-finite spans, read at every draw (they change with live points). */
  spans: () => MarkSpan[][];
  /** The labels each axis drew last ([x, y]): written to the chart's data attributes. */
  ticks: [string[], string[]];
  /** The user dragged a range: live points must not reset it. */
  onZoom: () => void;
}

/**
 * The non-null value nearest to `idx` (the left one on a tie), or null outside the series'
 * first..last point: runs log at different steps, and a finished run shows no value past its end.
 */
export function nearestValue(column: ReadonlyArray<number | null | undefined>, idx: number): number | null {
  if (column[idx] != null) return column[idx];
  let left = idx - 1;
  while (left >= 0 && column[left] == null) left--;
  let right = idx + 1;
  while (right < column.length && column[right] == null) right++;
  if (left < 0 || right >= column.length) return null;
  return idx - left <= right - idx ? column[left]! : column[right]!;
}

/** `#rrggbb` or `rgb(...)` with an alpha, for band fills in a run's colour. */
export function withAlpha(color: string, alpha: number): string {
  const hex = /^#([0-9a-f]{6})$/i.exec(color);
  if (hex) {
    const n = parseInt(hex[1]!, 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }
  const rgb = /^rgba?\(([^,]+),([^,]+),([^,)]+)/.exec(color);
  return rgb ? `rgba(${rgb[1]},${rgb[2]},${rgb[3]}, ${alpha})` : color;
}

/**
 * uPlot options for one chart. The raw line is the prominent one and the smoothed line the
 * secondary (dashed), as TensorBoard's and W&B's raw-first views draw them.
 */
export function plotOptions(lines: readonly PlotLine[], env: PlotEnv): uPlot.Options {
  const single = lines.length === 1;
  const muted = env.color('var(--fg-muted)');
  const grid = { stroke: env.color('var(--grid)') };
  const shown = (u: uPlot, v: number | null, si: number, idx: number | null) =>
    formatNumber(v ?? (single || idx == null ? null : nearestValue(u.data[si] as Array<number | null>, idx)));
  const series: uPlot.Series[] = [{ label: env.xBy }];
  const bands: uPlot.Band[] = [];
  for (const line of lines) {
    const color = env.color(line.color);
    const name = single ? 'value' : line.label;
    series.push({ label: name, stroke: color, width: 1.5, value: shown });
    if (line.smoothed) {
      const stroke = single ? env.color('var(--chart-smooth)') : color;
      series.push({ label: `${single ? '' : name + ' '}smoothed`, stroke, width: 1.5, dash: [6, 4], points: { show: false }, value: shown });
    }
    if (line.band) {
      // The bucket min/max as a shaded band (uPlot fills between two series' paths; a hairline edge keeps them built).
      const at = series.length;
      const fill = single ? env.color('var(--chart-band)') : withAlpha(color, 0.15);
      const edge = { stroke: fill, width: 1, points: { show: false }, value: shown };
      series.push({ ...edge, label: single ? 'max' : `${name} max` }, { ...edge, label: single ? 'min' : `${name} min` });
      bands.push({ series: [at, at + 1], fill });
    }
  }
  const record = (axis: 0 | 1, labels: string[]) => {
    env.ticks[axis] = labels;
    return labels;
  };
  return {
    width: env.width,
    height: env.height,
    scales: {
      x: { time: env.xBy === 'time', ...(env.xBy === 'step' ? { range: (_u, min, max) => xRange(min, max) } : {}) },
      y: env.logScale ? { distr: 3 } : { range: (_u, min, max) => yRange(min, max) },
    },
    axes: [
      {
        stroke: muted,
        grid,
        font: AXIS_FONT,
        ...(env.xBy === 'step'
          ? { incrs: STEP_INCRS, values: (_u: uPlot, splits: number[]) => record(0, formatStepTicks(splits)) }
          : {}),
      },
      {
        stroke: muted,
        grid,
        font: AXIS_FONT,
        values: (_u, splits) => record(1, formatTicks(splits, env.logScale)),
        size: (_u, values) => yAxisSize(values),
      },
    ],
    series,
    bands,
    legend: { live: true },
    cursor: { drag: { x: true, y: false } },
    hooks: {
      draw: [(u) => env.spans().forEach((spans) => drawMarks(u, spans, env.color('var(--chart-nonfinite)')))],
      setSelect: [(u) => u.select.width > 0 && env.onZoom()],
    },
  };
}
