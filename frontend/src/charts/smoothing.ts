/** Below this many points a series is sparse: an average over a handful of points moves its values. */
export const SPARSE_POINTS = 50;

/**
 * Whether a key is drawn unsmoothed: evaluations (a point every few hundred steps: eval/loss at
 * step 250 read 2.66 smoothed against 0.595 raw), learning rates (a schedule, not noise: smoothing
 * moved the warmup peak from step 5 to ~11) and any key with few points.
 */
export function isSparse(key: string, points: number): boolean {
  const last = key.slice(key.lastIndexOf('/') + 1);
  return key.startsWith('eval/') || last === 'lr' || last === 'learning_rate' || points < SPARSE_POINTS;
}

/** The EMA weight a key's chart uses: the slider's for dense series, none for sparse ones. */
export function smoothingFor(key: string, points: number, weight: number): number {
  return isSparse(key, points) ? 0 : weight;
}
