/**
 * Exponential moving average with TensorBoard's debiasing, so the first points are not
 * dragged toward zero. Gaps stay gaps and do not reset the average: null (a NaN point) stays
 * null and undefined (no point at this step, on a chart shared with other runs) stays undefined.
 * weight 0 returns the values unchanged; weight must be in [0, 1).
 */
export function ema<T extends number | null | undefined>(values: readonly T[], weight: number): T[] {
  if (weight <= 0) return values.slice();
  const out = new Array<T>(values.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v == null || !Number.isFinite(v)) {
      out[i] = (v === undefined ? undefined : null) as T;
      continue;
    }
    last = last * weight + (1 - weight) * v;
    n++;
    out[i] = (last / (1 - weight ** n)) as T;
  }
  return out;
}
