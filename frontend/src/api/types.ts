import { ALGORITHM_NAMES } from './algorithms';
import type { components } from './schema';

type S = components['schemas'];
export type Me = S['Me'];
/** A run as the runs list answers it: with its headline metric. */
export type Run = S['RunListItem'];
export type HeadlineMetric = S['HeadlineMetric'];
export type RunDetail = S['RunDetail'];
export type RunLink = S['RunLinkPublic'];
export type Attempt = S['AttemptPublic'];
/** One node of a multi-node attempt (a gang). */
export type AttemptNode = S['NodePublic'];
export type SlurmJob = S['SlurmJobPublic'];
export type RunStatus = Run['status'];
export type Series = S['Series'];
export type SeriesPoint = S['SeriesPoint'];
export type KeySummary = S['KeySummary'];
export type LogLine = S['LogLineOut'];
/** A log line as the logs view shows it: what the live stream sends (docs/api.md) and a fetched line has too. */
export type ShownLogLine = Pick<LogLine, 'id' | 'rank' | 'text' | 'time'>;
export type Sample = S['SampleOut'];
export type PromptSummary = S['PromptSummary'];
/** Compare's samples: the same prompts across runs, each run at its shown step (GET /api/v1/samples). */
export type SampleComparison = S['SampleComparison'];
export type RunSamplesAt = S['RunSamplesAt'];
export type PromptAcrossRuns = S['PromptAcrossRuns'];
export type SampleComparisonQuery = import('./schema').operations['compare_samples_api_v1_samples_get']['parameters']['query'];
export type Checkpoint = S['CheckpointPublic'];
export type CheckpointFile = S['CheckpointFile'];
/** An eval run of a checkpoint, with the last value of each of its eval/* metrics. */
export type CheckpointEvaluation = S['CheckpointEvaluation'];
/** A command run's spec section (algorithm command: the user's own script). */
export type CommandOptions = S['CommandOptions'];
export type CodeSource = S['CodeSource'];

export type RunListQuery = NonNullable<import('./schema').operations['list_runs_api_v1_runs_get']['parameters']['query']>;
export type Algorithm = NonNullable<RunListQuery['algorithm']>[number];
export type RunSort = NonNullable<RunListQuery['sort']>;
/** Every algorithm, in the table's order (rlplane/spec/algorithms.py, generated into ./algorithms.ts). */
export const ALGORITHMS: Algorithm[] = [...ALGORITHM_NAMES];
