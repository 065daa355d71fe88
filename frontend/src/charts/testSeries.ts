import type { Series } from '../api/types';
import type { SeriesColumns } from './series';

/** Tests write series as points (readable); what GET /metrics/columns would answer for them. */
export function asColumns(s: Series): SeriesColumns {
  const field = <K extends keyof Series['points'][number]>(k: K) => s.points.map((p) => p[k]);
  return {
    key: s.key, total_points: s.total_points, downsampled: s.downsampled,
    step: field('step'), value: field('value'), min: field('min'), max: field('max'), count: field('count'), time: field('time'),
    first_nan_step: s.points.map((p) => p.first_nan_step ?? null),
  };
}
