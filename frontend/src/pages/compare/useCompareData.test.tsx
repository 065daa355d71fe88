import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ReactNode } from 'react';
import { renderHook } from '@testing-library/react';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { KeySummary, RunStatus } from '../../api/types';
import { json, runDetail } from '../../test/fixtures';
import { useCompareData } from './useCompareData';

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

interface FakeRun {
  status: RunStatus;
  keys: KeySummary[];
}

const summary = (key: string, count: number, lastStep = count): KeySummary => ({ key, count, last_step: lastStep, last_value: count, last_time: 1 });

/** One run of GET /api/v1/compare's answer, as api/compare/service.py builds it from the run's keys and cursor. */
function answerRun(id: number, fake: FakeRun | undefined, cursor: [number, number] | undefined) {
  if (!fake) return { id, run: null, error: { status: 404, detail: 'Run not found' }, keys: null };
  const count = fake.keys.reduce((n, k) => n + k.count, 0);
  const top = Math.max(-1, ...fake.keys.map((k) => k.last_step));
  const data = !cursor ? fake.keys : count === cursor[0] ? [] : fake.keys.filter((k) => k.last_step > cursor[1]);
  return { id, run: runDetail({ id, status: fake.status }), error: null, keys: { cursor: `${count}:${top}`, full: !cursor, count, data } };
}

function parseCursors(text: string | null): Map<number, [number, number]> {
  const parts = (text ?? '').split(',').filter(Boolean).map((part) => part.split(':').map(Number));
  return new Map(parts.map(([id, count, step]) => [id!, [count!, step!]]));
}

/** The fake API over `runs` (changed by the test between polls); what each poll asked, and any other request. */
function stubCompare(runs: Record<number, FakeRun>) {
  const polls: Array<{ runs: string | null; cursors: string | null }> = [];
  const other: string[] = [];
  vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
    const url = new URL(req.url);
    if (url.pathname !== '/api/v1/compare') {
      other.push(url.pathname);
      return json({ detail: `unexpected ${url.pathname}` }, 404);
    }
    const q = url.searchParams;
    polls.push({ runs: q.get('runs'), cursors: q.get('cursors') });
    const cursors = parseCursors(q.get('cursors'));
    const ids = q.get('runs')!.split(',').map(Number);
    return json({ runs: ids.map((id) => answerRun(id, runs[id], cursors.get(id))) });
  }));
  return { polls, other };
}

function renderCompare(ids: number[]) {
  vi.useFakeTimers(); // Date too: TanStack times its polls against Date.now
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  const wrapper = ({ children }: { children: ReactNode }) => <QueryClientProvider client={client}>{children}</QueryClientProvider>;
  const hook = renderHook(({ runs }) => useCompareData(runs), { wrapper, initialProps: { runs: ids } });
  const done = () => {
    hook.unmount();
    client.clear();
  };
  return { ...hook, done };
}

const keysOf = (keys: KeySummary[] | undefined) => keys?.map((k) => [k.key, k.count]);

describe('useCompareData', () => {
  it('asks about all compared runs in one request, then only for the keys that changed since each cursor', async () => {
    const runs: Record<number, FakeRun> = {
      3: { status: 'running', keys: [summary('train/loss', 2), summary('train/lr', 2)] },
      7: { status: 'running', keys: [summary('train/loss', 1)] },
    };
    const { polls, other } = stubCompare(runs);
    const { result, done } = renderCompare([3, 7, 9]);

    await vi.waitFor(() => expect(result.current.every((r) => !r.loading)).toBe(true));
    expect(polls).toEqual([{ runs: '3,7,9', cursors: null }]);
    expect(result.current.map((r) => [r.id, r.run?.id, keysOf(r.keys), r.error])).toEqual([
      [3, 3, [['train/loss', 2], ['train/lr', 2]], null],
      [7, 7, [['train/loss', 1]], null],
      [9, undefined, undefined, 'run 9: not found'],
    ]);
    const before = result.current.map((r) => r.keys);

    runs[3]!.keys[0] = summary('train/loss', 3);
    await vi.advanceTimersByTimeAsync(10_000);
    await vi.waitFor(() => expect(keysOf(result.current[0]!.keys)).toEqual([['train/loss', 3], ['train/lr', 2]]));
    // Run 9 cannot be read: not asked about again. Each other run sends its cursor back.
    expect(polls).toEqual([{ runs: '3,7,9', cursors: null }, { runs: '3,7', cursors: '3:4:2,7:1:1' }]);
    expect(result.current[1]!.keys).toBe(before[1]); // nothing changed: the same list, so memos on it hold
    expect(other).toEqual([]); // no request per run
    done();
  });

  it("drops a run's cursor when its merged counts do not add up, and asks for its whole list at once", async () => {
    const runs: Record<number, FakeRun> = { 3: { status: 'running', keys: [summary('train/loss', 2), summary('train/lr', 2)] } };
    const { polls } = stubCompare(runs);
    const { result, done } = renderCompare([3]);
    await vi.waitFor(() => expect(polls).toHaveLength(1));

    // A point of train/lr arrived at an earlier step (no new last step): the delta, past the cursor's step, misses it.
    runs[3]!.keys = [summary('train/loss', 3), summary('train/lr', 3, 2)];
    await vi.advanceTimersByTimeAsync(10_000);
    await vi.waitFor(() => expect(keysOf(result.current[0]!.keys)).toEqual([['train/loss', 3], ['train/lr', 3]]));
    expect(polls.slice(1)).toEqual([{ runs: '3', cursors: '3:4:2' }, { runs: '3', cursors: null }]);

    await vi.advanceTimersByTimeAsync(10_000);
    await vi.waitFor(() => expect(polls).toHaveLength(4));
    expect(polls[3]).toEqual({ runs: '3', cursors: '3:6:3' }); // whole again: a cursor again
    done();
  });

  it('polls runs until they end, once more after, then no more; a run ended from the start only once', async () => {
    const runs: Record<number, FakeRun> = {
      3: { status: 'queued', keys: [] },
      4: { status: 'succeeded', keys: [summary('eval/accuracy', 1)] },
    };
    const { polls } = stubCompare(runs);
    const { result, done } = renderCompare([3, 4]);
    const tick = async (n: number) => {
      await vi.advanceTimersByTimeAsync(10_000);
      await vi.waitFor(() => expect(polls).toHaveLength(n));
    };
    await vi.waitFor(() => expect(polls).toHaveLength(1));
    expect(polls[0]!.runs).toBe('3,4');

    await tick(2); // queued: it may start any moment
    runs[3]!.status = 'running';
    runs[3]!.keys = [summary('train/loss', 1)];
    await tick(3);
    await vi.waitFor(() => expect(result.current[0]!.run?.status).toBe('running'));
    runs[3]!.status = 'succeeded';
    runs[3]!.keys = [summary('train/loss', 2)];
    await tick(4);
    await vi.waitFor(() => expect(result.current[0]!.run?.status).toBe('succeeded'));
    runs[3]!.keys = [summary('train/loss', 3)]; // logged after the poll that saw it end
    await tick(5); // the last one
    await vi.waitFor(() => expect(keysOf(result.current[0]!.keys)).toEqual([['train/loss', 3]]));
    expect(polls.slice(1).map((p) => p.runs)).toEqual(['3', '3', '3', '3']);

    await vi.advanceTimersByTimeAsync(60_000);
    expect(polls).toHaveLength(5); // both ended: nothing more to ask
    done();
  });

  it('asks for the whole list of a run added, and forgets one removed', async () => {
    const runs: Record<number, FakeRun> = {
      3: { status: 'running', keys: [summary('train/loss', 2)] },
      7: { status: 'running', keys: [summary('train/loss', 5)] },
    };
    const { polls } = stubCompare(runs);
    const { result, rerender, done } = renderCompare([3]);
    await vi.waitFor(() => expect(result.current[0]!.loading).toBe(false));

    rerender({ runs: [3, 7] });
    expect(result.current.map((r) => [r.id, r.loading, r.run?.id])).toEqual([[3, false, 3], [7, true, undefined]]);
    await vi.waitFor(() => expect(result.current[1]!.loading).toBe(false));
    expect(polls[1]).toEqual({ runs: '3,7', cursors: '3:2:2' });

    rerender({ runs: [7] });
    await vi.waitFor(() => expect(polls).toHaveLength(3));
    expect(polls[2]).toEqual({ runs: '7', cursors: '7:5:5' });
    rerender({ runs: [7, 3] });
    await vi.waitFor(() => expect(polls).toHaveLength(4));
    expect(polls[3]).toEqual({ runs: '7,3', cursors: '7:5:5' }); // run 3 was forgotten: its whole list
    await vi.waitFor(() => expect(keysOf(result.current[1]!.keys)).toEqual([['train/loss', 2]]));
    done();
  });
});
