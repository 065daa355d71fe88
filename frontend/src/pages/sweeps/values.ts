import { metricNumber, type SweepDetail, type Trial } from '../../api/sweeps';

/** One spelling per parameter value (choices may be numbers, strings, booleans, null or lists). */
export const paramKey = (value: unknown): string => JSON.stringify(value) ?? String(value);

/** A searched value as a person reads it: four significant digits (0.0003162), the rest in its title. */
export function formatParam(value: unknown): string {
  if (value === undefined) return '—';
  if (typeof value === 'number') return Number.isFinite(value) ? String(Number(value.toPrecision(4))) : String(value);
  if (typeof value === 'string') return value;
  return paramKey(value);
}

/** The searched paths in the document's order, then any a trial has that the space lacks (never, but not lost). */
export function searchedPaths(sweep: Pick<SweepDetail, 'space' | 'trial_list'>): string[] {
  const paths = Object.keys(sweep.space);
  for (const trial of sweep.trial_list) for (const path of Object.keys(trial.params)) if (!paths.includes(path)) paths.push(path);
  return paths;
}

export type SortColumn = 'number' | 'value';
export type SortDirection = 'ascending' | 'descending';
export interface TrialSort {
  column: SortColumn;
  direction: SortDirection;
}

/** Numbers (the infinities among them) in order, then NaN, then trials with no value yet, whichever the direction. */
function valueGroup(value: number | null): number {
  if (value == null) return 2;
  return Number.isNaN(value) ? 1 : 0;
}

export function sortTrials(trials: readonly Trial[], sort: TrialSort): Trial[] {
  const sign = sort.direction === 'ascending' ? 1 : -1;
  const byNumber = (a: Trial, b: Trial) => a.number - b.number;
  if (sort.column === 'number') return [...trials].sort((a, b) => sign * byNumber(a, b));
  return [...trials].sort((a, b) => {
    const [x, y] = [metricNumber(a.value), metricNumber(b.value)];
    const group = valueGroup(x) - valueGroup(y);
    if (group !== 0) return group;
    if (x != null && y != null && !Number.isNaN(x) && x !== y) return sign * (x < y ? -1 : 1);
    return byNumber(a, b);
  });
}

/** A first click on a column: the metric best first, the trial numbers in order. Then each click reverses. */
export function nextSort(current: TrialSort, column: SortColumn, goal: SweepDetail['goal']): TrialSort {
  if (current.column === column) return { column, direction: current.direction === 'ascending' ? 'descending' : 'ascending' };
  return { column, direction: column === 'value' && goal === 'max' ? 'descending' : 'ascending' };
}
