/**
 * Exponential moving average with TensorBoard's debiasing, so the first points are not
 * dragged toward zero. Gaps (null) stay gaps and do not reset the average.
 * weight 0 returns the values unchanged; weight must be in [0, 1).
 */
export function ema(values: ReadonlyArray<number | null>, weight: number): Array<number | null> {
  if (weight <= 0) return values.slice();
  const out: Array<number | null> = new Array(values.length);
  let last = 0;
  let n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v == null || !Number.isFinite(v)) {
      out[i] = null;
      continue;
    }
    last = last * weight + (1 - weight) * v;
    n++;
    out[i] = last / (1 - weight ** n);
  }
  return out;
}
