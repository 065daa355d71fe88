import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { ApiError, authFetch, detailText } from './client';
import { queryKeys } from './queryKeys';

import type { components } from './schema';

/*
 * Pipelines: chains of stages, each stage an ordinary run. The wire types are the API's own (generated from
 * openapi.json into schema.d.ts), so the two cannot drift.
 */

type Schemas = components['schemas'];
export type PipelineSummary = Schemas['PipelineSummary'];
export type PipelineDetail = Schemas['PipelineDetail'];
export type Stage = Schemas['StagePublic'];
export type PipelineStatus = PipelineDetail['status'];
export type StageStatus = Stage['status'];

export interface PipelineListQuery {
  project?: string;
  limit?: number;
}

// A Record over the status words, so a word added to StageStatus fails the typecheck here.
const RETRY: Record<StageStatus, boolean> = {
  waiting: false,
  running: false,
  succeeded: false,
  failed: true,
  skipped: true,
  cancelled: true,
  stale: true,
};
/** What POST .../retry takes; the API still answers 409 when that changed since the last poll. */
export const isRetryable = (status: StageStatus) => RETRY[status];

async function call<T>(path: string, init?: RequestInit): Promise<T> {
  const response = await authFetch(path, init);
  const body: unknown = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, detailText(body));
  return body as T;
}

const post = <T>(path: string, body: unknown = {}) =>
  call<T>(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });

export function listPipelines(query: PipelineListQuery): Promise<{ items: PipelineSummary[] }> {
  const params = new URLSearchParams();
  if (query.project) params.set('project', query.project);
  if (query.limit != null) params.set('limit', String(query.limit));
  const qs = params.toString();
  return call(`/api/v1/pipelines${qs ? `?${qs}` : ''}`);
}

export const getPipeline = (id: number) => call<PipelineDetail>(`/api/v1/pipelines/${id}`);
export const cancelPipeline = (id: number) => post<PipelineDetail>(`/api/v1/pipelines/${id}/cancel`);
/** `spec` re-runs the stage from a changed run spec; without it, from the one it had. */
export const retryStage = (id: number, stage: string, spec?: unknown) =>
  post<PipelineDetail>(`/api/v1/pipelines/${id}/stages/${encodeURIComponent(stage)}/retry`, spec === undefined ? {} : { spec });

export function usePipelines(query: PipelineListQuery) {
  return useQuery({
    queryKey: queryKeys.pipelines.list(query),
    queryFn: () => listPipelines(query),
    // Polling, as the runs list does: stages move on by themselves.
    refetchInterval: 5_000,
  });
}

export function usePipeline(id: number) {
  return useQuery({
    queryKey: queryKeys.pipelines.detail(id),
    queryFn: () => getPipeline(id),
    enabled: Number.isInteger(id) && id > 0,
    // An ended pipeline changes only by someone's retry, whose answer replaces the cached detail.
    refetchInterval: (query) => (query.state.data?.status === 'running' ? 3_000 : false),
  });
}

export type PipelineAction = { kind: 'cancel' } | { kind: 'retry'; stage: string };

/** Cancel or retry: both answer the new detail, which replaces the cached one at once. */
export function usePipelineAction(id: number) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (action: PipelineAction) =>
      action.kind === 'cancel' ? cancelPipeline(id) : retryStage(id, action.stage),
    onSuccess: (detail) => {
      client.setQueryData(queryKeys.pipelines.detail(id), detail);
      // Both start or stop stage runs: the pipelines list and the runs list show them.
      void client.invalidateQueries({ queryKey: queryKeys.pipelines.lists() });
      void client.invalidateQueries({ queryKey: queryKeys.runs.lists() });
    },
  });
}
