import { useState } from 'react';
import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { ApiError } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import type { KeySummary, RunDetail } from '../../api/types';
import { fetchComparison } from './compareApi';
import { ComparePoll, type HeldRun } from './comparePoll';

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

function shown(id: number, held: HeldRun | undefined, failed: unknown): ComparedRun {
  if (!held) {
    return { id, run: undefined, keys: undefined, loading: failed == null, error: failed == null ? null : describeError(id, failed) };
  }
  const error = held.problem ? describeError(id, new ApiError(held.problem.status, held.problem.detail)) : null;
  return { id, run: held.run, keys: held.keys, loading: false, error };
}

/**
 * Every compared run's detail and key list in one request (GET /api/v1/compare), every 10 s while any may still
 * change: each poll asks only about runs not known to have ended (and once more about one that just ended, for
 * the points it logged after the poll before), and only for the keys that changed since each run's cursor.
 */
export function useCompareData(ids: readonly number[]): ComparedRun[] {
  const [poll] = useState(() => new ComparePoll(fetchComparison));
  const query = useQuery({
    queryKey: queryKeys.compare.runs(ids),
    queryFn: () => poll.poll(ids),
    // A run added or removed: the others stay drawn while the new list's first answer comes.
    placeholderData: keepPreviousData,
    // ComparePoll keeps unchanged runs' objects itself; comparing 20 runs' key lists again here would be waste.
    structuralSharing: false,
    retry: noRetryOn4xx,
    refetchInterval: () => (poll.due(ids).length > 0 ? REFRESH_MS : false),
  });
  const byId = new Map(query.data?.map((held) => [held.id, held]));
  return ids.map((id) => shown(id, byId.get(id), query.error));
}
