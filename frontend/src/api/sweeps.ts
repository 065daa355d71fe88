import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { ApiError, authFetch, detailText } from './client';
import { queryKeys } from './queryKeys';

import type { components } from './schema';

/*
 * Sweeps: a run spec searched over a space of its fields, each trial an ordinary run. The wire types are the API's
 * own (generated from openapi.json into schema.d.ts), so the two cannot drift.
 */

type Schemas = components['schemas'];
export type SweepSummary = Schemas['SweepSummary'];
export type SweepDetail = Schemas['SweepDetail'];
export type Trial = Schemas['TrialPublic'];
export type SweepStatus = SweepDetail['status'];
export type TrialState = Trial['state'];
/** A metric value as the API sends it: a number, or NaN and the infinities spelled as strings. */
export type MetricValue = Trial['value'];

export interface SweepListQuery {
  project?: string;
  limit?: number;
}

async function call<T>(path: string, init?: RequestInit): Promise<T> {
  const response = await authFetch(path, init);
  const body: unknown = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, detailText(body));
  return body as T;
}

export function listSweeps(query: SweepListQuery): Promise<{ items: SweepSummary[] }> {
  const params = new URLSearchParams();
  if (query.project) params.set('project', query.project);
  if (query.limit != null) params.set('limit', String(query.limit));
  const qs = params.toString();
  return call(`/api/v1/sweeps${qs ? `?${qs}` : ''}`);
}

export const getSweep = (id: number) => call<SweepDetail>(`/api/v1/sweeps/${id}`);
export const cancelSweep = (id: number) =>
  call<SweepDetail>(`/api/v1/sweeps/${id}/cancel`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });

export function useSweeps(query: SweepListQuery) {
  return useQuery({
    queryKey: queryKeys.sweeps.list(query),
    queryFn: () => listSweeps(query),
    // Polling, as the runs and pipelines lists do: trials start and finish by themselves.
    refetchInterval: 5_000,
  });
}

export function useSweep(id: number) {
  return useQuery({
    queryKey: queryKeys.sweeps.detail(id),
    queryFn: () => getSweep(id),
    enabled: Number.isInteger(id) && id > 0,
    // An ended sweep starts no more trials, and its trials' values are final.
    // A cancelled sweep's trials go on running until their runs have stopped: follow them until then too.
    refetchInterval: (query) => {
      const sweep = query.state.data;
      return sweep && (sweep.status === 'running' || sweep.trial_list.some((t) => t.state === 'running')) ? 3_000 : false;
    },
  });
}

/** Cancel answers the new detail, which replaces the cached one at once. */
export function useCancelSweep(id: number) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: () => cancelSweep(id),
    onSuccess: (detail) => {
      client.setQueryData(queryKeys.sweeps.detail(id), detail);
      // Cancelling stops the running trials' runs: the sweeps list and the runs list show them.
      void client.invalidateQueries({ queryKey: queryKeys.sweeps.lists() });
      void client.invalidateQueries({ queryKey: queryKeys.runs.lists() });
    },
  });
}

/** A metric value as a number: NaN and the infinities as JS has them, null for none yet. */
export function metricNumber(value: MetricValue): number | null {
  if (value == null) return null;
  return typeof value === 'number' ? value : Number(value);
}
