import type { SampleComparisonQuery } from '../../api/types';

/** Compare's two views: `view=samples`, or none for the charts. */
export type CompareView = 'charts' | 'samples';
export const parseView = (raw: string | null): CompareView => (raw === 'samples' ? 'samples' : 'charts');

export type SampleAt = NonNullable<SampleComparisonQuery['at']>;

/**
 * The Samples view as its URL spells it: `at=step&step=N`, `at=best&metric=K&mode=min`, following one prompt with
 * `at=all&prompt_hash=H`, filters `reward_below=x`, `truncated=1`, `failed=reward/format`, and `limit=N` prompts.
 */
export interface SamplesState {
  at: SampleAt;
  step: number | null;
  metric: string;
  mode: 'max' | 'min';
  promptHash: string | null;
  rewardBelow: number | null;
  truncated: boolean;
  failed: string;
  limit: number;
}

export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 500;
/** The API compares at most this many runs in one request. */
export const MAX_RUNS = 20;

const HASH = /^[0-9a-f]{1,64}$/;

function parseNumber(raw: string | null): number | null {
  if (raw == null || raw.trim() === '') return null;
  const n = Number(raw);
  return Number.isFinite(n) ? n : null;
}

export function parseSamplesState(params: URLSearchParams): SamplesState {
  const rawHash = params.get('prompt_hash');
  const promptHash = rawHash && HASH.test(rawHash) ? rawHash : null;
  const rawAt = params.get('at');
  // at=all lists every step of one prompt: without a prompt it is no view the API serves.
  const at: SampleAt = rawAt === 'step' || rawAt === 'best' || (rawAt === 'all' && promptHash) ? rawAt : 'latest';
  const step = parseNumber(params.get('step'));
  const limit = parseNumber(params.get('limit'));
  return {
    at,
    step: step != null && Number.isSafeInteger(step) && step >= 0 ? step : null,
    metric: params.get('metric')?.trim() ?? '',
    mode: params.get('mode') === 'min' ? 'min' : 'max',
    promptHash,
    rewardBelow: parseNumber(params.get('reward_below')),
    truncated: params.get('truncated') === '1' || params.get('truncated') === 'true',
    failed: params.get('failed')?.trim() ?? '',
    limit: limit != null && Number.isSafeInteger(limit) && limit >= 1 ? Math.min(limit, MAX_LIMIT) : DEFAULT_LIMIT,
  };
}

export const hasFilters = (s: SamplesState) => s.rewardBelow != null || s.truncated || s.failed !== '';

/** The request for these runs in this state, or what the user has still to give (a step, a metric). */
export function samplesQuery(runIds: readonly number[], s: SamplesState): { query: SampleComparisonQuery } | { missing: string } {
  if (!runIds.length) return { missing: 'None of the compared runs could be read.' };
  if (s.at === 'step' && s.step == null) return { missing: 'Enter a step: each run shows its last samples at or before it.' };
  if (s.at === 'best' && !s.metric) return { missing: "Enter a metric (e.g. eval/accuracy): each run shows its best checkpoint's samples by it." };
  const query: SampleComparisonQuery = { runs: runIds.slice(0, MAX_RUNS).join(','), at: s.at, limit: s.limit };
  if (s.at === 'step') query.step = s.step;
  if (s.at === 'best') Object.assign(query, { metric: s.metric, mode: s.mode });
  if (s.promptHash) query.prompt_hash = s.promptHash;
  if (s.rewardBelow != null) query.reward_below = s.rewardBelow;
  if (s.truncated) query.truncated = true;
  if (s.failed) query.failed = s.failed;
  return { query };
}
