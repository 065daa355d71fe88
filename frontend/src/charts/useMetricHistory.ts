import { useEffect, useMemo, useState } from 'react';
import { api, unwrap } from '../api/client';
import type { Series } from '../api/types';
import type { RunEventBus } from '../sse/runEvents';
import { cancelEarly, historyUrl, readEarly, takeEarlyResponse } from './earlyFetch';
import type { SeriesColumns } from './series';
import { MAX_POINTS } from './plotData';
import { MetricStore } from './store';

// The server keeps each bucket's min and max, so ~1500 points still show spikes.
export { MAX_POINTS };

// index.html's early request brings every key's history at once: worth reading for a run this
// small (it is how a run opens in under a second); past it, charts fetch their own keys as they
// scroll into view, and the early request is cancelled (on its X-Series-Count header, before
// its body) so the server stops writing it.
export const EAGER_KEYS = 40;

export interface MetricHistory {
  store: MetricStore;
  /** The key list has arrived. */
  loaded: boolean;
  error: unknown;
}

async function fetchSeries(runId: number, keys: string[]): Promise<SeriesColumns[]> {
  const query = { keys, max_points: MAX_POINTS };
  const res = await unwrap(api.GET('/api/v1/runs/{run_id}/metrics/columns', { params: { path: { run_id: runId }, query } }));
  return res.series;
}

/**
 * A run's metric store plus its live points, owned by the run page: the key list is asked for
 * with the page (beside the run's own request) and the store survives tab switches.
 */
export function useMetricHistory(runId: number, bus: RunEventBus): MetricHistory {
  const [error, setError] = useState<unknown>(null);
  const store = useMemo(() => new MetricStore((keys) => fetchSeries(runId, keys), setError), [runId]);
  const [loaded, setLoaded] = useState(false);

  useEffect(() => {
    // Subscribe before fetching: points that arrive meanwhile wait in the store, and the
    // overlap with the fetched history is dropped by step.
    const off = bus.on('metrics', (series) => store.append(series));
    let cancelled = false;
    setLoaded(false);
    setError(null);
    const early = takeEarlyResponse(historyUrl(runId, MAX_POINTS));
    const keyList = unwrap(api.GET('/api/v1/runs/{run_id}/metrics/keys', { params: { path: { run_id: runId } } }));
    keyList
      .then((list) => {
        if (cancelled) return;
        store.setKeyList(list.data);
        setLoaded(true);
      })
      .catch((err: unknown) => !cancelled && setError(err));
    if (early) {
      store.hold(); // charts' requests wait: the early answer may bring them all
      void early
        .then(async (response) => {
          if (!response) return;
          const header = response.headers.get('X-Series-Count');
          const count = header != null ? Number(header) : (await keyList).data.length;
          if (count > EAGER_KEYS) return cancelEarly(early);
          const body = await readEarly<{ series: Series[] }>(early);
          if (!cancelled && body) store.load(body.series);
        })
        .catch(() => cancelEarly(early))
        .finally(() => store.release());
    }
    return () => {
      cancelled = true;
      if (early) cancelEarly(early); // left before it was read: the server stops writing it
      off();
    };
  }, [bus, store, runId]);

  return { store, loaded, error };
}
