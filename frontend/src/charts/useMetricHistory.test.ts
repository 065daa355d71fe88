import { afterEach, describe, expect, it, vi } from 'vitest';
import { renderHook, waitFor } from '@testing-library/react';
import { RunEventBus } from '../sse/runEvents';
import { historyUrl } from './earlyFetch';
import { asColumns } from './testSeries';
import { EAGER_KEYS, MAX_POINTS, useMetricHistory } from './useMetricHistory';

const summary = (key: string, i: number) => ({ key, count: 3, last_step: 3, last_value: i, last_time: 1 });
const series = (key: string) => ({
  key, total_points: 1, downsampled: false, points: [{ step: 1, value: 1, min: 1, max: 1, count: 1, time: 1, first_nan_step: null }],
});
const check = (ok: boolean) => {
  if (!ok) throw new Error('charts fetch history from /metrics/columns');
};
const json = (body: unknown) => new Response(JSON.stringify(body), { headers: { 'Content-Type': 'application/json' } });

/** The API: the key list, and per-key history (recorded). */
function stubApi(keys: string[]) {
  const asked: string[][] = [];
  vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
    const url = new URL(req.url);
    if (url.pathname.endsWith('/metrics/keys')) return json({ data: keys.map(summary), count: keys.length });
    const wanted = url.searchParams.getAll('keys');
    asked.push(wanted);
    check(url.pathname.endsWith('/metrics/columns'));
    return json({ run_id: 7, max_points: MAX_POINTS, series: wanted.map((k) => asColumns(series(k))) });
  }));
  return asked;
}

/** index.html's early request, answered with every key's history and its X-Series-Count header. */
function early(keys: string[]) {
  let cancelled = false;
  const text = JSON.stringify({ run_id: 7, max_points: MAX_POINTS, series: keys.map(series) });
  const body = new ReadableStream({
    start(c) {
      c.enqueue(new TextEncoder().encode(text));
      c.close();
    },
    cancel() {
      cancelled = true;
    },
  });
  const response = new Response(body, { headers: { 'X-Series-Count': String(keys.length) } });
  window.__rlplaneEarly = { url: historyUrl(7, MAX_POINTS), response: Promise.resolve(response) };
  return () => cancelled;
}

afterEach(() => {
  vi.unstubAllGlobals();
  window.__rlplaneEarly = undefined;
});

describe('useMetricHistory', () => {
  it('takes the early answer whole for a small run, and fetches nothing more', async () => {
    const keys = ['train/loss', 'train/lr'];
    const asked = stubApi(keys);
    const wasCancelled = early(keys);
    const { result } = renderHook(() => useMetricHistory(7, new RunEventBus()));
    await waitFor(() => expect(result.current.store.loaded('train/lr')).toBe(true));
    result.current.store.request('train/loss');
    await new Promise((r) => setTimeout(r, 10));
    expect(asked).toEqual([]);
    expect(wasCancelled()).toBe(false);
  });

  it('drops the early answer of a run with many keys on its header, and fetches only what is asked', async () => {
    const keys = Array.from({ length: EAGER_KEYS + 1 }, (_, i) => `layers/${i}/norm`);
    const asked = stubApi(keys);
    const wasCancelled = early(keys);
    const { result } = renderHook(() => useMetricHistory(7, new RunEventBus()));
    await waitFor(() => expect(wasCancelled()).toBe(true));
    await waitFor(() => expect(result.current.loaded).toBe(true));
    expect(result.current.store.keys()).toHaveLength(keys.length);
    result.current.store.request('layers/3/norm');
    await waitFor(() => expect(asked).toEqual([['layers/3/norm']]));
    expect(result.current.store.loaded('layers/4/norm')).toBe(false);
  });
});
