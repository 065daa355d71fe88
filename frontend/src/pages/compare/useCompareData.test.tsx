import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ReactNode } from 'react';
import { renderHook } from '@testing-library/react';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { RunStatus } from '../../api/types';
import { json, runDetail } from '../../test/fixtures';
import { useCompareData } from './useCompareData';

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('useCompareData polling', () => {
  it('polls a queued run until it ends, and its key list only while a worker holds it', async () => {
    vi.useFakeTimers(); // Date too: TanStack times its polls against Date.now
    let status: RunStatus = 'queued';
    const asked = { detail: 0, keys: 0 };
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      if (new URL(req.url).pathname.endsWith('/metrics/keys')) {
        asked.keys += 1;
        return json({ data: [], count: 0 });
      }
      asked.detail += 1;
      return json(runDetail({ id: 3, status }));
    }));
    const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
    const wrapper = ({ children }: { children: ReactNode }) => <QueryClientProvider client={client}>{children}</QueryClientProvider>;
    const { result, unmount } = renderHook(() => useCompareData([3]), { wrapper });
    const settle = async (ms: number) => {
      await vi.advanceTimersByTimeAsync(ms);
      await vi.waitFor(() => expect(result.current[0]!.loading).toBe(false));
    };

    await settle(0);
    expect(asked).toEqual({ detail: 1, keys: 1 });
    await settle(10_000); // queued: it may start any moment, but it logs nothing yet
    expect(asked).toEqual({ detail: 2, keys: 1 });

    status = 'running';
    await settle(10_000);
    expect(result.current[0]!.run?.status).toBe('running');
    await settle(10_000);
    expect(asked.keys).toBeGreaterThan(1);

    status = 'succeeded';
    await settle(10_000);
    const { detail, keys } = asked;
    await settle(30_000);
    expect(asked).toEqual({ detail, keys }); // ended: nothing more to ask
    unmount();
    client.clear();
  });
});
