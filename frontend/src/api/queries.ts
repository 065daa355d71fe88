import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from './client';
import { queryKeys } from './queryKeys';

export function useMe() {
  return useQuery({ queryKey: queryKeys.me(), queryFn: () => unwrap(api.GET('/api/v1/me')), staleTime: 60_000 });
}

export function useRun(runId: number) {
  return useQuery({
    queryKey: queryKeys.runs.detail(runId),
    queryFn: () => unwrap(api.GET('/api/v1/runs/{run_id}', { params: { path: { run_id: runId } } })),
    // The SSE status events refresh it at once; the poll is a safety net for a dropped stream.
    refetchInterval: 15_000,
  });
}

export function useMetricKeys(runId: number, live: boolean) {
  return useQuery({
    queryKey: queryKeys.runs.metricKeys(runId),
    queryFn: () => unwrap(api.GET('/api/v1/runs/{run_id}/metrics/keys', { params: { path: { run_id: runId } } })),
    staleTime: live ? 5_000 : 5 * 60_000,
    refetchInterval: live ? 10_000 : false,
  });
}
