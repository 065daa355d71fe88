import { afterEach, describe, expect, it, vi } from 'vitest';
import { cancelEarly, historyUrl, readEarly, takeEarlyResponse } from './earlyFetch';
import { MAX_POINTS } from './useMetricHistory';
import html from '../../index.html?raw';

afterEach(() => {
  window.__rlplaneEarly = undefined;
});

describe('early metric history', () => {
  it('index.html starts the same request the run page makes', () => {
    expect(html).toContain(`/metrics?max_points=${MAX_POINTS}'`);
    expect(historyUrl(7, MAX_POINTS)).toBe(`/api/v1/runs/7/metrics?max_points=${MAX_POINTS}`);
  });

  it('is taken once, and only for its own URL and a 200 answer', async () => {
    const body = { run_id: 7, max_points: MAX_POINTS, series: [] };
    window.__rlplaneEarly = { url: historyUrl(7, MAX_POINTS), response: Promise.resolve(new Response(JSON.stringify(body))) };
    expect(takeEarlyResponse(historyUrl(8, MAX_POINTS))).toBeNull();
    expect(await readEarly(takeEarlyResponse(historyUrl(7, MAX_POINTS))!)).toEqual(body);
    expect(takeEarlyResponse(historyUrl(7, MAX_POINTS))).toBeNull();
    window.__rlplaneEarly = { url: historyUrl(7, MAX_POINTS), response: Promise.resolve(new Response('{}', { status: 401 })) };
    expect(await readEarly(takeEarlyResponse(historyUrl(7, MAX_POINTS))!)).toBeNull();
    window.__rlplaneEarly = { url: historyUrl(7, MAX_POINTS), response: Promise.reject(new Error('offline')) };
    expect(await readEarly(takeEarlyResponse(historyUrl(7, MAX_POINTS))!)).toBeNull();
  });

  it('can be dropped unread, which cancels its body', async () => {
    const response = new Response(new ReadableStream({ pull: () => {} }));
    const cancel = vi.spyOn(response.body!, 'cancel');
    window.__rlplaneEarly = { url: historyUrl(7, MAX_POINTS), response: Promise.resolve(response) };
    cancelEarly(takeEarlyResponse(historyUrl(7, MAX_POINTS))!);
    await vi.waitFor(() => expect(cancel).toHaveBeenCalled());
  });
});

describe("Compare's early first poll", () => {
  it('index.html starts the URL compareApi takes, and the first poll uses its answer instead of asking', async () => {
    const { earlyComparisonUrl, fetchComparison } = await import('../pages/compare/compareApi');
    expect(html).toContain("'/api/v1/compare?runs=' + ids.join(',')");
    expect(earlyComparisonUrl([3, 7])).toBe('/api/v1/compare?runs=3,7');
    const runs = [{ id: 3, run: null, error: { status: 404, detail: 'run 3 not found' }, keys: null }];
    window.__rlplaneEarly = { url: earlyComparisonUrl([3, 7]), response: Promise.resolve(new Response(JSON.stringify({ runs }))) };
    const asked = vi.fn(async () => new Response(JSON.stringify({ runs: [] })));
    vi.stubGlobal('fetch', asked);
    try {
      expect(await fetchComparison([3, 7], new Map())).toEqual(runs);
      expect(asked).not.toHaveBeenCalled();
      expect(await fetchComparison([3, 7], new Map())).toEqual([]); // taken once: the next poll asks
      expect(asked).toHaveBeenCalledTimes(1);
    } finally {
      vi.unstubAllGlobals();
    }
  });
});
