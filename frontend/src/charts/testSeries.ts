import type { Series } from '../api/types';
import type { LiveColumns } from '../sse/runEvents';
import type { SeriesColumns } from './series';

/** Tests write series as points (readable); what GET /metrics/columns would answer for them (a series that is not
 * downsampled without the columns that follow from its values). */
export function asColumns(s: Series): SeriesColumns {
  const field = <K extends keyof Series['points'][number]>(k: K) => s.points.map((p) => p[k]);
  const columns = { key: s.key, total_points: s.total_points, downsampled: s.downsampled, step: field('step'), value: field('value'), time: field('time') };
  if (!s.downsampled) return columns;
  return { ...columns, min: field('min'), max: field('max'), count: field('count'), first_nan_step: s.points.map((p) => p.first_nan_step ?? null) };
}

/** A live metrics message's entry for one point of `key` (its time: the step). */
export function live(key: string, step: number, value: number | string = 1): LiveColumns {
  return { key, step: [step], value: [value], time: [step] };
}
