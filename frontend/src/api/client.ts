import createClient, { type Middleware } from 'openapi-fetch';
import type { paths } from './schema';
import { getToken } from './token';
import { handleUnauthorized } from './unauthorized';

/** Thrown for any non-2xx answer; `detail` is the API's message, flattened for display. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
  ) {
    super(`${status}: ${detail}`);
  }
}

export function detailText(body: unknown): string {
  const detail = (body as { detail?: unknown } | null)?.detail;
  if (typeof detail === 'string') return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((e: { loc?: unknown[]; msg?: string }) => `${(e.loc ?? []).join('.')}: ${e.msg ?? ''}`)
      .join('; ');
  }
  return body == null ? 'no answer' : JSON.stringify(body);
}

export function authHeaders(): Record<string, string> {
  const token = getToken();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

const auth: Middleware = {
  onRequest({ request }) {
    const token = getToken();
    if (token) request.headers.set('Authorization', `Bearer ${token}`);
    return request;
  },
  onResponse({ response }) {
    if (response.status === 401) handleUnauthorized();
    return response;
  },
};

// Relative base: the dashboard is served by the API itself (or proxied to it in dev).
// fetch is looked up per call (not captured once) so tests and later polyfills can replace it.
export const api = createClient<paths>({ baseUrl: window.location.origin, fetch: (req) => globalThis.fetch(req) });
api.use(auth);

/** Unwraps an openapi-fetch result: the data, or an ApiError carrying the server's detail. */
export async function unwrap<T>(
  promise: Promise<{ data?: T; error?: unknown; response: Response }>,
): Promise<T> {
  const { data, error, response } = await promise;
  if (!response.ok) throw new ApiError(response.status, detailText(error));
  return data as T;
}

/** Plain fetch with the token, for what the typed client cannot do (streams, blobs). */
export async function authFetch(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  for (const [k, v] of Object.entries(authHeaders())) headers.set(k, v);
  const response = await fetch(path, { ...init, headers });
  if (response.status === 401) handleUnauthorized();
  return response;
}
