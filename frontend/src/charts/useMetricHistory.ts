import { useEffect, useMemo, useState } from 'react';
import { api, unwrap } from '../api/client';
import type { RunEventBus } from '../sse/runEvents';
import { historyUrl, takeEarly } from './earlyFetch';
import { MetricStore } from './store';

// The server keeps each bucket's min and max, so ~1500 points still show spikes.
export const MAX_POINTS = 1500;

export interface MetricHistory {
  store: MetricStore;
  loaded: boolean;
  error: unknown;
}

/**
 * A run's metric history plus its live points, owned by the run page: the history request starts
 * with the page (beside the run's own request, not after it) and survives tab switches.
 */
export function useMetricHistory(runId: number, bus: RunEventBus): MetricHistory {
  const store = useMemo(() => new MetricStore(), [runId]); // eslint-disable-line react-hooks/exhaustive-deps
  const [loaded, setLoaded] = useState(false);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    // Subscribe before fetching: points that arrive meanwhile wait in the store, and the
    // overlap with the fetched history is dropped by step.
    const off = bus.on('metrics', (points) => store.append(points));
    let cancelled = false;
    setLoaded(false);
    setError(null);
    const fetchHistory = () =>
      unwrap(api.GET('/api/v1/runs/{run_id}/metrics', { params: { path: { run_id: runId }, query: { max_points: MAX_POINTS } } }));
    takeEarly<Awaited<ReturnType<typeof fetchHistory>>>(historyUrl(runId, MAX_POINTS))
      .then((early) => early ?? fetchHistory())
      .then((res) => {
        if (cancelled) return;
        store.load(res.series);
        setLoaded(true);
      })
      .catch((err: unknown) => !cancelled && setError(err));
    return () => {
      cancelled = true;
      off();
    };
  }, [bus, store, runId]);

  return { store, loaded, error };
}
