import type { Series } from '../../api/types';

export interface EvalValue {
  key: string;
  value: number | string;
  /** The evaluation's own step: the checkpoint's, or the latest evaluation before it. */
  step: number;
}

/** The keys an evaluation writes (the API takes at most 100 keys in one history request). */
export function evalKeys(keys: ReadonlyArray<{ key: string }>): string[] {
  return keys
    .map((k) => k.key)
    .filter((k) => k.startsWith('eval/'))
    .sort()
    .slice(0, 100);
}

/**
 * Each eval key's value at a checkpoint's step, or at the latest evaluation before it when the two
 * schedules differ (an evaluation after the checkpoint says nothing about it).
 */
export function evalAt(series: readonly Series[], step: number): EvalValue[] {
  const out: EvalValue[] = [];
  for (const s of series) {
    let hit: Series['points'][number] | undefined;
    for (const p of s.points) {
      if (p.step > step) break;
      hit = p;
    }
    if (hit) out.push({ key: s.key, value: hit.value, step: hit.step });
  }
  return out;
}

/** A checkpoint's metadata as label/value lines: nested objects flattened to dotted keys. */
export function metadataLines(metadata: Record<string, unknown>, skip: readonly string[] = [], prefix = ''): Array<[string, string]> {
  const lines: Array<[string, string]> = [];
  for (const [key, value] of Object.entries(metadata)) {
    const name = prefix + key;
    if (skip.includes(name)) continue;
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      lines.push(...metadataLines(value as Record<string, unknown>, skip, `${name}.`));
    } else {
      lines.push([name, Array.isArray(value) ? value.join(', ') : String(value)]);
    }
  }
  return lines;
}
