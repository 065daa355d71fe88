/** Axis rules shared by every chart: ranges that never invent a scale, labels that fit. */

/** The font uPlot draws axis labels in (set on the axes, so measuring with it is exact). */
export const AXIS_FONT = '12px system-ui, -apple-system, "Segoe UI", sans-serif';
const TICK_AND_GAP = 10 + 5; // uPlot's default tick length and label gap
const PADDING = 6;

let context: CanvasRenderingContext2D | null | undefined;
function measure(text: string): number {
  if (context === undefined) {
    try {
      context = document.createElement('canvas').getContext('2d');
    } catch {
      context = null; // jsdom has no canvas
    }
    if (context) context.font = AXIS_FONT;
  }
  return context ? context.measureText(text).width : text.length * 7;
}

/** A y axis wide enough for its widest label: a fixed width clipped "-1e-5" to "1e-5". */
export function yAxisSize(labels: ReadonlyArray<string | null> | null | undefined, measureText = measure): number {
  const widest = (labels ?? []).reduce((m, label) => Math.max(m, label ? measureText(label) : 0), 0);
  return Math.ceil(Math.max(widest, measureText('0.0'))) + TICK_AND_GAP + PADDING;
}

/**
 * The y range: padded around the data. A constant series gets a band around its value (uPlot's
 * default gave a constant zero 0..100); no data gives 0..1.
 */
export function yRange(min: number | null, max: number | null): [number, number] {
  if (min == null || max == null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (min === max) {
    const pad = min === 0 ? 1 : Math.abs(min) * 0.1;
    return [min - pad, max + pad];
  }
  const pad = (max - min) * 0.05;
  return [min - pad, max + pad];
}

/** The x range: the data's own, widened by one step for a single point. */
export function xRange(min: number | null, max: number | null): [number, number] {
  if (min == null || max == null) return [0, 1];
  return min === max ? [min - 1, max + 1] : [min, max];
}

/** Step axes tick at whole steps only: a 3-step run showed 0.5, 1.5. */
export const STEP_INCRS: number[] = [];
for (let exp = 0; exp <= 15; exp++) for (const m of [1, 2, 5]) STEP_INCRS.push(m * 10 ** exp);
