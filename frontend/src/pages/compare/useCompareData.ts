import { useEffect, useRef } from 'react';
import { useQueries, useQueryClient } from '@tanstack/react-query';
import { api, ApiError, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import { isActive, isTerminal } from '../../api/runStatus';
import type { KeySummary, RunDetail } from '../../api/types';
import type { SeriesColumns } from '../../charts/series';
import { MAX_POINTS } from '../../charts/useMetricHistory';

const REFRESH_MS = 10_000;

export interface ComparedRun {
  id: number;
  run: RunDetail | undefined;
  /** The run's metric keys with their counts and last points; histories are fetched per chart. */
  keys: KeySummary[] | undefined;
  loading: boolean;
  /** Why this run (or its metrics) cannot be shown, worded for the page: "run 99: not found". */
  error: string | null;
}

const noRetryOn4xx = (count: number, error: unknown) => !(error instanceof ApiError && error.status < 500) && count < 2;

export function describeError(id: number, error: unknown): string {
  if (error instanceof ApiError) {
    if (error.status === 404) return `run ${id}: not found`;
    if (error.status === 403) return `run ${id}: no access (it belongs to a project you are not a member of)`;
    return `run ${id}: ${error.detail}`;
  }
  return `run ${id}: ${error instanceof Error ? error.message : String(error)}`;
}

/** One run's history for some keys: what a chart on screen asks for. */
export async function fetchCompareSeries(runId: number, keys: string[]): Promise<SeriesColumns[]> {
  const query = { keys, max_points: MAX_POINTS };
  const res = await unwrap(api.GET('/api/v1/runs/{run_id}/metrics/columns', { params: { path: { run_id: runId }, query } }));
  return res.series;
}

/**
 * Each run's detail and key list, polled every 10 s: the detail until the run ends (a queued run starts on
 * its own), the key list while the run is active (only then does it log).
 */
export function useCompareData(ids: readonly number[]): ComparedRun[] {
  const details = useQueries({
    queries: ids.map((id) => ({
      queryKey: queryKeys.runs.detail(id),
      queryFn: () => unwrap(api.GET('/api/v1/runs/{run_id}', { params: { path: { run_id: id } } })),
      retry: noRetryOn4xx,
      refetchInterval: (q: { state: { data?: RunDetail } }) =>
        q.state.data && !isTerminal(q.state.data.status) ? REFRESH_MS : false,
    })),
  });
  const metrics = useQueries({
    queries: ids.map((id, i) => {
      const run = details[i]?.data;
      const active = run != null && isActive(run.status);
      return {
        queryKey: queryKeys.runs.metricKeys(id),
        queryFn: () => unwrap(api.GET('/api/v1/runs/{run_id}/metrics/keys', { params: { path: { run_id: id } } })),
        enabled: run != null,
        retry: noRetryOn4xx,
        refetchInterval: active ? REFRESH_MS : (false as const),
        staleTime: active ? 0 : 5 * 60_000,
      };
    }),
  });
  useRefreshWhenFinished(ids, details.map((d) => d.data?.status));
  return ids.map((id, i) => {
    const detail = details[i]!;
    const metric = metrics[i]!;
    const error = detail.error ?? metric.error;
    return {
      id,
      run: detail.data,
      keys: metric.data?.data,
      loading: detail.isPending || (detail.data != null && metric.isPending),
      error: error ? describeError(id, error) : null,
    };
  });
}

/** A run that just left an active status logged its last points after our last poll: fetch them once. */
function useRefreshWhenFinished(ids: readonly number[], statuses: ReadonlyArray<RunDetail['status'] | undefined>) {
  const client = useQueryClient();
  const wasActive = useRef(new Map<number, boolean>());
  const signature = ids.map((id, i) => `${id}:${statuses[i] ?? ''}`).join(',');
  useEffect(() => {
    ids.forEach((id, i) => {
      const status = statuses[i];
      if (status == null) return;
      const active = isActive(status);
      if (wasActive.current.get(id) && !active) void client.invalidateQueries({ queryKey: queryKeys.runs.metricKeys(id) });
      wasActive.current.set(id, active);
    });
  }, [signature]); // eslint-disable-line react-hooks/exhaustive-deps
}
