import type uPlot from 'uplot';
import { ema } from './ema';
import { markSpans, type MarkSpan } from './nonFinite';
import { forLog, xValues, type SeriesBuffer } from './series';
import { smoothingFor } from './smoothing';
import type { ChartLine } from './source';

/** What charts ask the server for; a series with more points comes back downsampled. */
export const MAX_POINTS = 1500;

/** What decides a chart's uPlot options; the chart is rebuilt only when this changes. */
export interface PlotLine {
  label: string;
  color: string;
  smoothed: boolean;
  /** Downsampled: the buckets' min/max drawn as a band around the line. */
  band: boolean;
}

export interface Plot {
  lines: PlotLine[];
  /** Identity of `lines` (labels, colours, which parts are drawn). */
  shapeKey: string;
  data: uPlot.AlignedData;
  /** Non-finite stretches, per line. */
  spans: MarkSpan[][];
  /** Points of the line with the most, and its last step: data-points / data-last-step. */
  points: number;
  lastStep: number | null;
}

type Column = Array<number | null | undefined>;

/** The points a line has (or will have, by the key list). */
function pointsOf(line: ChartLine): number {
  return line.buf ? line.buf.steps.length : (line.expected ?? 0);
}

/**
 * One chart's data: x, then per line its raw values, the smoothed ones (a dense line only:
 * smoothing.ts), and the bucket max/min (when downsampled). Several runs are aligned on the union
 * of their steps: a step a run did not log is undefined (uPlot joins the line across it), a NaN
 * point is null (a gap).
 */
export function buildPlot(key: string, lines: readonly ChartLine[], xBy: 'step' | 'time', logScale: boolean, slider: number): Plot {
  const bufs = lines.map((l) => l.buf);
  const single = lines.length === 1;
  const xs = single ? xValues(bufs[0] ?? EMPTY, xBy) : unionSteps(bufs);
  const place = single ? (col: Column) => col : aligner(xs, bufs);
  const plotLines: PlotLine[] = [];
  const data: Column[] = [xs];
  const spans: MarkSpan[][] = [];
  lines.forEach((line, i) => {
    const buf = bufs[i] ?? EMPTY;
    const raw = place(forLog(buf.values, logScale), i);
    // Decided per line, so a short run beside a long one in Compare stays raw, as on its own page.
    const weight = smoothingFor(key, pointsOf(line), slider);
    const smoothed = weight > 0;
    // Before its history arrives, a line is drawn as its stored count says it will be.
    const band = bufs[i] ? buf.downsampled : (line.expected ?? 0) > MAX_POINTS;
    data.push(raw);
    if (smoothed) data.push(ema(raw, weight));
    if (band) data.push(place(forLog(buf.maxs, logScale), i), place(forLog(buf.mins, logScale), i));
    plotLines.push({ label: line.label, color: line.color, smoothed, band });
    spans.push(markSpans(buf, single ? xs : buf.steps));
  });
  let points = 0;
  let lastStep: number | null = null;
  for (const buf of bufs) {
    if (!buf || buf.steps.length === 0) continue;
    points = Math.max(points, buf.steps.length);
    lastStep = Math.max(lastStep ?? -Infinity, buf.steps[buf.steps.length - 1]!);
  }
  const shapeKey = plotLines.map((l) => `${l.label}\u0000${l.color}\u0000${+l.smoothed}${+l.band}`).join('\u0001');
  return { lines: plotLines, shapeKey, data: data as uPlot.AlignedData, spans, points, lastStep };
}

const EMPTY: SeriesBuffer = { steps: [], times: [], values: [], mins: [], maxs: [], nonFinite: [], downsampled: false };

function unionSteps(bufs: ReadonlyArray<SeriesBuffer | undefined>): number[] {
  const steps = new Set<number>();
  for (const buf of bufs) for (const s of buf?.steps ?? []) steps.add(s);
  return [...steps].sort((a, b) => a - b);
}

function aligner(xs: readonly number[], bufs: ReadonlyArray<SeriesBuffer | undefined>) {
  const index = new Map(xs.map((s, i) => [s, i]));
  const positions = bufs.map((buf) => (buf?.steps ?? []).map((s) => index.get(s)!));
  return (col: Column, line: number): Column => {
    const out: Column = new Array(xs.length).fill(undefined);
    const at = positions[line]!;
    for (let i = 0; i < at.length; i++) out[at[i]!] = col[i] ?? null;
    return out;
  };
}
