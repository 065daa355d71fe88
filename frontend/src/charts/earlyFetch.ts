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
 * Takes the early request for `url` (once). Anything but a 200 answer yields null, so the caller
 * asks again through the typed client, which handles 401 and error details as everywhere else.
 */
export async function takeEarly<T>(url: string): Promise<T | null> {
  const early = window.__rlplaneEarly;
  if (!early || early.url !== url) return null;
  window.__rlplaneEarly = undefined;
  try {
    const response = await early.response;
    return response.status === 200 ? ((await response.json()) as T) : null;
  } catch {
    return null;
  }
}
