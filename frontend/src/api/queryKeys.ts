import type { AlertListQuery } from './alerts';
import type { PipelineListQuery } from './pipelines';
import type { SweepListQuery } from './sweeps';
import type { RunListQuery, SampleComparisonQuery } from './types';

/*
 * Every TanStack Query key of the dashboard is built here (the "query key factory" of TkDodo's "Effective
 * React Query Keys"), so a query and the invalidation meant for it cannot spell its key two ways. Keys nest
 * from broad to narrow, and TanStack matches them by prefix: invalidating `runs.one(7)` refreshes
 * everything about run 7, `runs.detail(7)` only the run itself.
 */

const runs = {
  all: () => ['runs'] as const,
  lists: () => [...runs.all(), 'list'] as const,
  list: (query: RunListQuery) => [...runs.lists(), query] as const,
  /** Everything about one run: its detail and all it logged. */
  one: (id: number) => [...runs.all(), id] as const,
  detail: (id: number) => [...runs.one(id), 'detail'] as const,
  metricKeys: (id: number) => [...runs.one(id), 'metric-keys'] as const,
  /** `counts`: the keys' point counts, so a new evaluation is a new query. */
  evalHistory: (id: number, keys: readonly string[] | null, counts: readonly number[] | undefined) =>
    [...runs.one(id), 'eval-history', { keys, counts }] as const,
  checkpoints: (id: number) => [...runs.one(id), 'checkpoints'] as const,
  checkpointFiles: (id: number, step: number, kind: string) => [...runs.checkpoints(id), 'files', { step, kind }] as const,
};

const samples = {
  all: (runId: number) => [...runs.one(runId), 'samples'] as const,
  latest: (runId: number) => [...samples.all(runId), 'latest'] as const,
  before: (runId: number, step: number | null) => [...samples.all(runId), 'before', step] as const,
  after: (runId: number, step: number | null) => [...samples.all(runId), 'after', step] as const,
  atStep: (runId: number, step: number | null, byReward: boolean) => [...samples.all(runId), 'step', { step, byReward }] as const,
  prompt: (runId: number, promptHash: string) => [...samples.all(runId), 'prompt', promptHash] as const,
  prompts: (runId: number) => [...samples.all(runId), 'prompts'] as const,
};

/**
 * Across runs, one request for every compared run, so these nest under no run: Compare's poll (details and key
 * lists, GET /api/v1/compare) and its Samples view.
 */
const compare = {
  all: () => ['compare'] as const,
  runs: (ids: readonly number[]) => [...compare.all(), 'runs', ids] as const,
  samples: (query: SampleComparisonQuery | null) => [...compare.all(), 'samples', query] as const,
};

const projects = {
  all: () => ['projects'] as const,
  list: () => [...projects.all(), 'list'] as const,
  detail: (name: string) => [...projects.all(), 'detail', name] as const,
};

const pipelines = {
  all: () => ['pipelines'] as const,
  lists: () => [...pipelines.all(), 'list'] as const,
  list: (query: PipelineListQuery) => [...pipelines.lists(), query] as const,
  detail: (id: number) => [...pipelines.all(), id, 'detail'] as const,
};

const sweeps = {
  all: () => ['sweeps'] as const,
  lists: () => [...sweeps.all(), 'list'] as const,
  list: (query: SweepListQuery) => [...sweeps.lists(), query] as const,
  detail: (id: number) => [...sweeps.all(), id, 'detail'] as const,
};

/** Alerts across runs (the runs list's markers) and one run's (its page), both lists of one endpoint. */
const alerts = {
  all: () => ['alerts'] as const,
  lists: () => [...alerts.all(), 'list'] as const,
  list: (query: AlertListQuery) => [...alerts.lists(), query] as const,
  detectors: () => [...alerts.all(), 'detectors'] as const,
};

const tokens = {
  all: () => ['tokens'] as const,
  list: (allUsers: boolean) => [...tokens.all(), 'list', { allUsers }] as const,
};

export const queryKeys = {
  /** Who is signed in, with their projects and roles. */
  me: () => ['me'] as const,
  runs,
  samples,
  compare,
  projects,
  pipelines,
  sweeps,
  alerts,
  tokens,
  users: { list: () => ['users', 'list'] as const },
  workers: { list: () => ['workers', 'list'] as const },
  queues: { list: () => ['queues', 'list'] as const },
  /** The usage report of a period counted back from when it is fetched, so the key holds its length, not its dates. */
  usage: { report: (query: { by: string; period: string }) => ['usage', 'report', query] as const },
};
