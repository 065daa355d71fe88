import { authHeaders } from '../api/client';
import { handleUnauthorized } from '../api/unauthorized';
import { SseParser, type SseEvent } from './parser';

export interface StreamOptions {
  url: string;
  onEvent: (event: SseEvent) => void;
  /** Called with true when connected and false while waiting to reconnect. */
  onState?: (connected: boolean) => void;
  /** Return false to stop reconnecting (e.g. after a `deleted` event). */
  shouldReconnect?: () => boolean;
  fetchImpl?: typeof fetch;
  retryMs?: number;
}

/**
 * Reads an SSE stream with fetch, because EventSource cannot send the Authorization header.
 * Reconnects after drops with Last-Event-ID so the server resumes exactly after the last event.
 * Returns a function that stops it.
 */
export function openEventStream(opts: StreamOptions): () => void {
  const controller = new AbortController();
  const parser = new SseParser();
  const doFetch = opts.fetchImpl ?? fetch;
  let failures = 0;

  const once = async (): Promise<void> => {
    const headers: Record<string, string> = { Accept: 'text/event-stream', ...authHeaders() };
    if (parser.lastEventId) headers['Last-Event-ID'] = parser.lastEventId;
    const response = await doFetch(opts.url, { headers, signal: controller.signal, cache: 'no-store' });
    if (response.status === 401) {
      handleUnauthorized();
      controller.abort();
      return;
    }
    if (!response.ok || !response.body) throw new Error(`event stream answered ${response.status}`);
    opts.onState?.(true);
    failures = 0;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      for (const event of parser.feed(value)) opts.onEvent(event);
    }
  };

  const loop = async (): Promise<void> => {
    while (!controller.signal.aborted) {
      try {
        await once();
      } catch {
        failures++;
      }
      if (controller.signal.aborted || opts.shouldReconnect?.() === false) return;
      opts.onState?.(false);
      // Back off on repeated failures, but come back quickly after a clean server close.
      const delay = Math.min(30_000, (opts.retryMs ?? 1000) * 2 ** Math.min(failures, 5));
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  };

  void loop();
  return () => controller.abort();
}
