/** A spec flattened to dotted paths (`train.lr`, `data.files[0]`), each value as JSON text. */
export type FlatSpec = Map<string, string>;

export function flattenSpec(value: unknown, prefix = '', out: FlatSpec = new Map()): FlatSpec {
  if (Array.isArray(value) && value.length > 0) {
    value.forEach((item, i) => flattenSpec(item, `${prefix}[${i}]`, out));
  } else if (isObject(value) && Object.keys(value).length > 0) {
    for (const [key, item] of Object.entries(value)) flattenSpec(item, prefix ? `${prefix}.${key}` : key, out);
  } else if (prefix) {
    // Empty lists and objects stay visible as leaves, so `[]` vs `[1]` shows up as a difference.
    out.set(prefix, JSON.stringify(value ?? null));
  }
  return out;
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
    const differs = values.some((v) => v !== values[0]);
    if (differs || showAll) rows.push({ path, values, differs });
  }
  return rows;
}

// Natural order, so `layers[10]` comes after `layers[9]`.
const collator = new Intl.Collator('en', { numeric: true });
function comparePaths(a: string, b: string): number {
  return collator.compare(a, b);
}
