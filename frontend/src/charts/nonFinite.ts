import type uPlot from 'uplot';
import type { NonFinite, SeriesBuffer } from './series';

/**
 * "NaN from step 250": what a chart says above its canvas when a series went non-finite, since
 * the line itself only shows a gap (or nothing at all when every point is NaN).
 */
export function describeNonFinite(buf: SeriesBuffer | undefined): string | null {
  const marks = buf?.nonFinite ?? [];
  if (!buf || marks.length === 0) return null;
  const kinds = new Set(marks.map((m) => m.kind));
  const kind = kinds.size === 1 ? marks[0]!.kind : 'NaN/inf';
  const first = marks[0]!;
  const lastIndex = buf.steps.length - 1;
  // The run still ends non-finite: say since when (the start of that final stretch).
  if (buf.values[lastIndex] == null && marks[marks.length - 1]!.at === lastIndex) {
    let start = marks.length - 1;
    while (start > 0 && marks[start - 1]!.at >= marks[start]!.at - 1 && buf.values[marks[start - 1]!.at] == null) start--;
    const from = `${kind} from step ${marks[start]!.step}`;
    return start > 0 ? `${from} (first at step ${first.step})` : from;
  }
  if (marks.length === 1) return `${kind} at step ${first.step}`;
  return `${kind} at ${marks.length} steps, first ${first.step}`;
}

export interface MarkSpan {
  /** x values (step or time) where the span starts and ends; a single point has x0 === x1. */
  x0: number;
  x1: number;
  /** The span reaches the series' end: drawn to the plot's right edge. */
  open: boolean;
  kind: NonFinite['kind'] | 'NaN/inf';
}

/** Consecutive non-finite points merged into spans, positioned on the chart's x. */
export function markSpans(buf: SeriesBuffer, xs: readonly number[]): MarkSpan[] {
  const spans: Array<MarkSpan & { lastAt: number }> = [];
  const last = buf.steps.length - 1;
  for (const m of buf.nonFinite) {
    // A NaN inside a bucket sits at its own step on a step axis; on a time axis, at its bucket.
    const x = xs === buf.steps ? m.step : xs[m.at]!;
    const prev = spans[spans.length - 1];
    if (prev && m.at - prev.lastAt <= 1) {
      prev.x1 = Math.max(prev.x1, xs[m.at]!);
      prev.lastAt = m.at;
      prev.open = m.at === last && buf.values[last] == null;
      if (prev.kind !== m.kind) prev.kind = 'NaN/inf';
      continue;
    }
    spans.push({ x0: x, x1: x, open: m.at === last && buf.values[last] == null, kind: m.kind, lastAt: m.at });
  }
  return spans.map(({ x0, x1, open, kind }) => ({ x0, x1, open, kind }));
}

/**
 * Draws spans on the plot: a tinted band with a solid edge where the values went non-finite, and
 * the kind written at its top. Runs after uPlot's own drawing, in canvas pixels.
 */
export function drawMarks(u: uPlot, spans: readonly MarkSpan[], color: string): void {
  if (spans.length === 0) return;
  const { ctx } = u;
  const { left, top, width, height } = u.bbox;
  const ratio = uPlotRatio(u);
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, top, width, height);
  ctx.clip();
  ctx.font = `${Math.round(11 * ratio)}px system-ui, sans-serif`;
  ctx.textBaseline = 'top';
  const textHeight = 11 * ratio;
  for (const s of spans) {
    const x0 = u.valToPos(s.x0, 'x', true);
    const x1 = s.open ? left + width : Math.max(u.valToPos(s.x1, 'x', true), x0 + 3 * ratio);
    ctx.globalAlpha = 0.16;
    ctx.fillStyle = color;
    ctx.fillRect(x0, top, x1 - x0, height);
    ctx.globalAlpha = 1;
    ctx.fillRect(x0 - ratio, top, 2 * ratio, height);
    const label = placeLabel(x0, ctx.measureText(s.kind).width, textHeight, u.bbox, 4 * ratio);
    ctx.fillText(s.kind, label.x, label.y);
  }
  ctx.restore();
}

interface Box {
  left: number;
  top: number;
  width: number;
  height: number;
}

/**
 * Where a mark's label goes (its top-left corner): right of the edge at x, or left of it where it
 * would run past the plot's right side, and never outside the plot, where the clip would cut it.
 */
export function placeLabel(x: number, textWidth: number, textHeight: number, box: Box, pad: number): { x: number; y: number } {
  const right = box.left + box.width;
  const after = x + pad;
  const wanted = after + textWidth <= right - pad ? after : x - pad - textWidth;
  return {
    x: clamp(wanted, box.left + pad, right - pad - textWidth),
    y: clamp(box.top + pad, box.top, box.top + box.height - textHeight),
  };
}

// The lower bound wins when the text is wider than the room: its start stays readable.
const clamp = (v: number, lo: number, hi: number) => Math.max(lo, Math.min(v, hi));

const uPlotRatio = (u: uPlot) => (u.ctx.canvas.width && u.width ? u.ctx.canvas.width / u.width : 1);
