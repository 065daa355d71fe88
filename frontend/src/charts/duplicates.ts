import { groupPanels } from './panels';
import type { SeriesBuffer } from './series';
import type { KeyInfo } from './source';

/**
 * Keys that may hold the same series (reward/mean and a single reward component, eval/accuracy
 * and eval/reward/arithmetic): same count, last step and last value. Only candidates; the points
 * decide (sameSeries), never the names.
 */
export function candidateGroups(keys: readonly KeyInfo[]): string[][] {
  const bySignature = new Map<string, string[]>();
  for (const k of keys) {
    if (k.points < 2) continue;
    let group = bySignature.get(k.signature);
    if (!group) bySignature.set(k.signature, (group = []));
    group.push(k.key);
  }
  return [...bySignature.values()].filter((g) => g.length > 1);
}

const equal = (a: number | null, b: number | null) =>
  a === b || (a != null && b != null && Math.abs(a - b) <= 1e-9 * Math.max(Math.abs(a), Math.abs(b)));

/**
 * Equal point for point (steps, values, NaN positions). Constant series are not merged: two
 * counters that both read 0 are a coincidence, not one metric logged twice.
 */
export function sameSeries(a: SeriesBuffer, b: SeriesBuffer): boolean {
  const n = a.steps.length;
  if (n < 2 || n !== b.steps.length || a.nonFinite.length !== b.nonFinite.length) return false;
  let varies = false;
  for (let i = 0; i < n; i++) {
    if (a.steps[i] !== b.steps[i] || !equal(a.values[i]!, b.values[i]!)) return false;
    if (!varies && a.values[i] !== a.values[0]) varies = true;
  }
  return varies;
}

/**
 * duplicate key → the key whose chart draws it (the first in reading order). `buffers` gives a
 * key's series for every run, or null while any of them is still loading.
 */
export function findDuplicates(
  groups: readonly string[][],
  buffers: (key: string) => ReadonlyArray<SeriesBuffer | undefined> | null,
): Map<string, string> {
  const out = new Map<string, string>();
  for (const group of groups) {
    const ordered = groupPanels(group).flatMap((p) => p.keys);
    for (let i = 0; i < ordered.length; i++) {
      const primary = ordered[i]!;
      const mine = out.has(primary) ? null : buffers(primary);
      if (!mine) continue;
      for (const other of ordered.slice(i + 1)) {
        const theirs = out.has(other) ? null : buffers(other);
        if (!theirs || theirs.length !== mine.length) continue;
        // Runs without either key agree; a run with only one of them does not.
        const agree = mine.every((buf, r) => (buf && theirs[r] ? sameSeries(buf, theirs[r]!) : !buf && !theirs[r]));
        if (agree && mine.some(Boolean)) out.set(other, primary);
      }
    }
  }
  return out;
}
