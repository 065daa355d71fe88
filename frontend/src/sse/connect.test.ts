import { describe, expect, it, vi } from 'vitest';
import { openEventStream } from './connect';
import type { SseEvent } from './parser';
import { setToken } from '../api/token';

function streamOf(chunks: string[]): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      chunks.forEach((x) => c.enqueue(enc.encode(x)));
      c.close();
    },
  });
}

describe('openEventStream', () => {
  it('sends the token, and reconnects with Last-Event-ID after the stream ends', async () => {
    setToken('secret-token');
    const seen: SseEvent[] = [];
    const calls: Headers[] = [];
    const fetchImpl = vi.fn(async (_url: RequestInfo | URL, init?: RequestInit) => {
      calls.push(new Headers(init?.headers));
      const body = calls.length === 1 ? ['id: c1\nevent: hello\nda', 'ta: {}\n\n'] : ['id: c2\nevent: deleted\ndata: {}\n\n'];
      return new Response(streamOf(body), { status: 200 });
    }) as unknown as typeof fetch;
    let deleted = false;
    const stop = openEventStream({
      url: '/api/v1/runs/1/events',
      fetchImpl,
      retryMs: 1,
      onEvent: (e) => {
        seen.push(e);
        if (e.event === 'deleted') deleted = true;
      },
      shouldReconnect: () => !deleted,
    });
    await vi.waitFor(() => expect(seen.map((e) => e.event)).toEqual(['hello', 'deleted']));
    stop();
    expect(calls[0]?.get('Authorization')).toBe('Bearer secret-token');
    expect(calls[0]?.get('Last-Event-ID')).toBeNull();
    expect(calls[1]?.get('Last-Event-ID')).toBe('c1');
    expect(fetchImpl).toHaveBeenCalledTimes(2);
  });
});
