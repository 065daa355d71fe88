import { STATUSES } from '../../api/runStatus';
import { ALGORITHMS, type Algorithm, type RunSort, type RunStatus } from '../../api/types';

/** The runs list's state; it lives in the URL so a filtered view is a shareable link. */
export interface RunFilters {
  status: RunStatus[];
  algorithm: Algorithm[];
  project: string;
  q: string;
  sort: RunSort;
  limit: number;
  offset: number;
}

export const DEFAULT_SORT: RunSort = '-created_at';
export const DEFAULT_LIMIT = 50;
const SORTS: RunSort[] = ['created_at', '-created_at', 'updated_at', '-updated_at', 'name', '-name', 'status', '-status', 'id', '-id'];

function int(value: string | null, fallback: number, min: number, max: number): number {
  const n = value == null ? NaN : Number.parseInt(value, 10);
  return Number.isFinite(n) ? Math.min(max, Math.max(min, n)) : fallback;
}

/** Reads the filters, ignoring values the API would reject rather than failing the page. */
export function parseFilters(params: URLSearchParams): RunFilters {
  const sort = params.get('sort') as RunSort | null;
  return {
    status: params.getAll('status').filter((s): s is RunStatus => (STATUSES as string[]).includes(s)),
    algorithm: params.getAll('algorithm').filter((a): a is Algorithm => (ALGORITHMS as string[]).includes(a)),
    project: params.get('project') ?? '',
    q: params.get('q') ?? '',
    sort: sort && SORTS.includes(sort) ? sort : DEFAULT_SORT,
    limit: int(params.get('limit'), DEFAULT_LIMIT, 1, 500),
    offset: int(params.get('offset'), 0, 0, Number.MAX_SAFE_INTEGER),
  };
}

/** Writes filters back, leaving defaults out so URLs stay short. */
export function toParams(f: RunFilters): URLSearchParams {
  const p = new URLSearchParams();
  f.status.forEach((s) => p.append('status', s));
  f.algorithm.forEach((a) => p.append('algorithm', a));
  if (f.project) p.set('project', f.project);
  if (f.q) p.set('q', f.q);
  if (f.sort !== DEFAULT_SORT) p.set('sort', f.sort);
  if (f.limit !== DEFAULT_LIMIT) p.set('limit', String(f.limit));
  if (f.offset) p.set('offset', String(f.offset));
  return p;
}

/** The API query for these filters. */
export function toQuery(f: RunFilters) {
  return {
    status: f.status.length ? f.status : undefined,
    algorithm: f.algorithm.length ? f.algorithm : undefined,
    project: f.project || undefined,
    q: f.q || undefined,
    sort: f.sort,
    limit: f.limit,
    offset: f.offset,
  };
}

/** Clicking a sorted column flips it; another column starts descending for dates, ascending otherwise. */
export function nextSort(current: RunSort, column: string): RunSort {
  if (current === column) return `-${column}` as RunSort;
  if (current === `-${column}`) return column as RunSort;
  return (column.endsWith('_at') ? `-${column}` : column) as RunSort;
}
