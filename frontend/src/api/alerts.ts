import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from './client';
import { queryKeys } from './queryKeys';
import { isActive } from './runStatus';
import type { RunDetail } from './types';

import type { components, paths } from './schema';

/*
 * Alerts: what a rule or a built-in RL detector found on a run, open until its condition clears. The wire types
 * are the API's own (generated from openapi.json into schema.d.ts), so the two cannot drift.
 */

type Schemas = components['schemas'];
export type Alert = Schemas['AlertPublic'];
export type AlertDelivery = Alert['deliveries'][number];
export type Detector = Schemas['DetectorPublic'];
export type AlertListQuery = NonNullable<paths['/api/v1/alerts']['get']['parameters']['query']>;

const DETECTOR_SOURCE = 'detector:';
/** The detector's name for an alert a built-in detector raised; null for a rule's. */
export const detectorName = (alert: Alert) =>
  alert.source.startsWith(DETECTOR_SOURCE) ? alert.source.slice(DETECTOR_SOURCE.length) : null;

// The API still evaluates a run's status rules ("it failed") this long after it ends (RECENT_ENDS in
// api/alerts/service.py), so an alert can open just after the run stops.
const SETTLING_MS = 10 * 60_000;
const RUN_POLL_MS = 10_000;

/** Alerts may still open or resolve: the run is active or ended moments ago. */
export function alertsMayChange(run: Pick<RunDetail, 'status' | 'ended_at'>, now = Date.now()): boolean {
  if (isActive(run.status)) return true;
  return run.ended_at != null && now - new Date(run.ended_at).getTime() < SETTLING_MS;
}

const listAlerts = (query: AlertListQuery) => unwrap(api.GET('/api/v1/alerts', { params: { query } }));

/** One run's alerts, open and resolved, newest first; polled while they may still change. */
export function useRunAlerts(run: Pick<RunDetail, 'id' | 'status' | 'ended_at'>) {
  const query: AlertListQuery = { run_id: run.id };
  return useQuery({
    queryKey: queryKeys.alerts.list(query),
    queryFn: () => listAlerts(query),
    select: (list) => list.items,
    refetchInterval: () => (alertsMayChange(run) ? RUN_POLL_MS : false),
  });
}

// The API's most; a dashboard with more open alerts than this has bigger worries than a missing marker.
const OPEN_LIMIT = 1000;
const OPEN_QUERY: AlertListQuery = { state: 'open', limit: OPEN_LIMIT };

function byRun(list: { items: Alert[] }): ReadonlyMap<number, Alert[]> {
  const runs = new Map<number, Alert[]>();
  for (const alert of list.items) runs.set(alert.run_id, [...(runs.get(alert.run_id) ?? []), alert]);
  return runs;
}

/** Every open alert the user may read, by run id: one request for the whole runs list, not one per row. */
export function useOpenAlertsByRun(refetchInterval: number) {
  return useQuery({
    queryKey: queryKeys.alerts.list(OPEN_QUERY),
    queryFn: () => listAlerts(OPEN_QUERY),
    select: byRun,
    refetchInterval,
  });
}

/** The built-in detectors, by name. They change only with the API's code, so they are asked for once. */
export function useDetectors(enabled: boolean) {
  return useQuery({
    queryKey: queryKeys.alerts.detectors(),
    queryFn: () => unwrap(api.GET('/api/v1/alert-detectors')),
    select: (list) => new Map(list.items.map((d) => [d.name, d])),
    enabled,
    staleTime: Infinity,
    gcTime: Infinity,
  });
}
