/** The metric history request index.html may have started before the app booted. */
interface Early {
  url: string;
  response: Promise<Response>;
}

declare global {
  interface Window {
    __rlplaneEarly?: Early;
  }
}

export function historyUrl(runId: number, maxPoints: number): string {
  return `/api/v1/runs/${runId}/metrics?max_points=${maxPoints}`;
}

/**
 * Takes the early request for `url` (once): its 200 answer, not yet read, or null (no such
 * request, another URL, an error status). The caller reads it, or cancels it: the server writes
 * every key's history series by series and stops when the body is cancelled.
 */
export function takeEarlyResponse(url: string): Promise<Response | null> | null {
  const early = window.__rlplaneEarly;
  if (!early || early.url !== url) return null;
  window.__rlplaneEarly = undefined;
  return early.response.then(
    (response) => {
      if (response.status === 200) return response;
      void response.body?.cancel();
      return null;
    },
    () => null,
  );
}

/** Reads an early answer; anything unreadable yields null, so the caller asks again normally. */
export async function readEarly<T>(response: Promise<Response | null>): Promise<T | null> {
  try {
    const r = await response;
    return r ? ((await r.json()) as T) : null;
  } catch {
    return null;
  }
}

/** Drops an early answer unread, which ends the server's work on it. */
export function cancelEarly(response: Promise<Response | null>): void {
  void response.then((r) => r?.body?.cancel().catch(() => {}));
}
