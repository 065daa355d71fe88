/** A spec flattened to dotted paths (`train.lr`, `data.files`), each value as JSON text. */
export type FlatSpec = Map<string, string>;

/**
 * Objects are flattened into their fields; a list is one value (compared and shown whole), so a
 * list that differs is one row, not a row per element beside its own.
 */
export function flattenSpec(value: unknown, prefix = '', out: FlatSpec = new Map()): FlatSpec {
  if (isObject(value) && Object.keys(value).length > 0) {
    for (const [key, item] of Object.entries(value)) flattenSpec(item, prefix ? `${prefix}.${key}` : key, out);
  } else if (prefix) {
    out.set(prefix, JSON.stringify(value ?? null));
  }
  return out;
}

/** Equal values; a field left out means the same as an empty list or object (`tags` absent vs `[]`). */
export function sameValue(a: string | undefined, b: string | undefined): boolean {
  return orEmpty(a) === orEmpty(b);
}

function orEmpty(value: string | undefined): string | undefined {
  return value === '[]' || value === '{}' ? undefined : value;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export interface DiffRow {
  path: string;
  /** One per spec, `undefined` where that spec lacks the path. */
  values: Array<string | undefined>;
  differs: boolean;
}

/** Rows over the union of paths, sorted; only the differing ones unless `showAll`. */
export function diffSpecs(specs: ReadonlyArray<FlatSpec>, showAll: boolean): DiffRow[] {
  const paths = new Set<string>();
  for (const spec of specs) for (const path of spec.keys()) paths.add(path);
  const rows: DiffRow[] = [];
  for (const path of [...paths].sort(comparePaths)) {
    const values = specs.map((spec) => spec.get(path));
    const differs = values.some((v) => !sameValue(v, values[0]));
    if (differs || showAll) rows.push({ path, values, differs });
  }
  return rows;
}

// Natural order, so `stage10` comes after `stage9`.
const collator = new Intl.Collator('en', { numeric: true });
function comparePaths(a: string, b: string): number {
  return collator.compare(a, b);
}
