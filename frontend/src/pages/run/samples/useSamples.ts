import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../../api/client';
import { queryKeys } from '../../../api/queryKeys';

type Query = NonNullable<import('../../../api/schema').operations['read_samples_api_v1_runs__run_id__samples_get']['parameters']['query']>;


function readSamples(runId: number, query: Query) {
  return unwrap(api.GET('/api/v1/runs/{run_id}/samples', { params: { path: { run_id: runId }, query } }));
}

/** The newest step with samples (null: none), and how many samples the run has. */
export function useLatestStep(runId: number) {
  return useQuery({
    queryKey: queryKeys.samples.latest(runId),
    queryFn: () => readSamples(runId, { sort: '-step', limit: 1 }),
    select: (page) => ({ step: page.data[0]?.step ?? null, count: page.count }),
    refetchInterval: 15_000,
  });
}

/** The steps with samples just before and after `step` (null where there is none), for the step buttons. */
export function useNeighbourSteps(runId: number, step: number | null) {
  const before = useQuery({
    queryKey: queryKeys.samples.before(runId, step),
    enabled: step != null && step > 0,
    queryFn: () => readSamples(runId, { step_max: (step ?? 1) - 1, sort: '-step', limit: 1 }),
  });
  const after = useQuery({
    queryKey: queryKeys.samples.after(runId, step),
    enabled: step != null,
    queryFn: () => readSamples(runId, { step_min: (step ?? 0) + 1, sort: 'step', limit: 1 }),
  });
  return { previous: before.data?.data[0]?.step ?? null, next: after.data?.data[0]?.step ?? null, error: before.error ?? after.error };
}

/** Every sample of one step (the API's page limit: a step logs far fewer). */
export function useStepSamples(runId: number, step: number | null, byReward: boolean) {
  return useQuery({
    queryKey: queryKeys.samples.atStep(runId, step, byReward),
    enabled: step != null,
    placeholderData: keepPreviousData,
    queryFn: () => readSamples(runId, { step: step ?? 0, sort: byReward ? '-reward' : 'step', limit: 1000 }),
  });
}

/** One prompt's samples across steps. */
export function usePromptSamples(runId: number, promptHash: string) {
  return useQuery({
    queryKey: queryKeys.samples.prompt(runId, promptHash),
    enabled: !!promptHash,
    queryFn: () => readSamples(runId, { prompt_hash: promptHash, limit: 1000 }),
  });
}

/** The run's distinct prompts, to pick one to follow. */
export function usePrompts(runId: number) {
  return useQuery({
    queryKey: queryKeys.samples.prompts(runId),
    queryFn: () => unwrap(api.GET('/api/v1/runs/{run_id}/samples/prompts', { params: { path: { run_id: runId }, query: { limit: 1000 } } })),
    refetchInterval: 15_000,
  });
}
