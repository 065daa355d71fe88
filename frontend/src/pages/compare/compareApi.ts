import { api, unwrap } from '../../api/client';
import type { components } from '../../api/schema';
import { readEarly, takeEarlyResponse } from '../../charts/earlyFetch';
import { MAX_POINTS } from '../../charts/useMetricHistory';

type Schemas = components['schemas'];
/** One run of GET /api/v1/compare's answer: its detail and key delta, or why it cannot be read. */
export type WireComparedRun = Schemas['ComparedRun'];
export type KeyDelta = Schemas['KeyDelta'];
export type RunProblem = Schemas['RunProblem'];
/** One run's series of POST /api/v1/compare/series: the points after `after_step`, or (null) the whole series. */
export type RunSeriesColumns = Schemas['RunSeriesColumns'];

/** The API's bounds per request (api/compare/schemas.py: MAX_RUNS, MAX_SERIES). */
export const MAX_RUNS = 100;
export const MAX_SERIES = 2000;

/** A series a chart lacks: `afterStep` set, only the points past the held copy's last step. */
export interface SeriesWant {
  runId: number;
  key: string;
  afterStep?: number;
}

/** The first poll of `ids` as index.html starts it before the app has loaded (a poll without cursors). */
export function earlyComparisonUrl(ids: readonly number[]): string {
  return `/api/v1/compare?runs=${ids.join(',')}`;
}

/** Each run's detail and keys: all of them for a run without a cursor, else only what changed since it. */
export async function fetchComparison(ids: readonly number[], cursors: ReadonlyMap<number, string>): Promise<WireComparedRun[]> {
  const sent = ids.flatMap((id) => {
    const cursor = cursors.get(id);
    return cursor ? [`${id}:${cursor}`] : [];
  });
  const early = sent.length ? null : takeEarlyResponse(earlyComparisonUrl(ids));
  if (early) {
    // The page's first poll, started by index.html while the app loaded (a 20-run Compare opens ~0.4 s sooner).
    const answer = await readEarly<{ runs: WireComparedRun[] }>(early);
    if (answer) return answer.runs;
  }
  const query = { runs: ids.join(','), ...(sent.length ? { cursors: sent.join(',') } : {}) };
  const answer = await unwrap(api.GET('/api/v1/compare', { params: { query } }));
  return answer.runs;
}

/** Several runs' series in one request, answered in the asked order. */
export async function fetchCompareSeries(wanted: readonly SeriesWant[]): Promise<RunSeriesColumns[]> {
  const series = wanted.map(({ runId, key, afterStep }) =>
    afterStep == null ? { run_id: runId, key } : { run_id: runId, key, after_step: afterStep },
  );
  const answer = await unwrap(api.POST('/api/v1/compare/series', { body: { max_points: MAX_POINTS, series } }));
  return answer.series;
}
