/** The compared runs as the URL spells them: `?runs=3,7,9`, in the user's order, no repeats. */
export interface RunIds {
  ids: number[];
  /** Parts of `runs=` that are not run ids, so the page can say which were ignored. */
  invalid: string[];
}

export function parseRunIds(raw: string | null): RunIds {
  const ids: number[] = [];
  const invalid: string[] = [];
  for (const part of (raw ?? '').split(',')) {
    const text = part.trim();
    if (!text) continue;
    const id = Number(text);
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(id) || id < 1) invalid.push(text);
    else if (!ids.includes(id)) ids.push(id);
  }
  return { ids, invalid };
}

/** Returns a copy of `params` with `runs=` set to `ids` (removed when empty). */
export function withRunIds(params: URLSearchParams, ids: readonly number[]): URLSearchParams {
  const next = new URLSearchParams(params);
  if (ids.length) next.set('runs', ids.join(','));
  else next.delete('runs');
  return next;
}

/** The query string with commas and slashes left readable (`runs=3,7,9`, `metric=eval/accuracy`), so the URL stays shareable by eye. */
export function toSearch(params: URLSearchParams): string {
  const text = params.toString().replace(/%2C/gi, ',').replace(/%2F/gi, '/');
  return text ? `?${text}` : '';
}
