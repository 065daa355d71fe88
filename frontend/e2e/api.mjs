// The e2e scripts' own API client: to compare what a page shows with what a run logged, and to
// make runs the pages are checked on.
export const ENDED = ['succeeded', 'failed', 'cancelled', 'lost'];

/** The 1-based line of the first line matching `pattern`. */
export const lineOf = (text, pattern) => text.split('\n').findIndex((l) => pattern.test(l)) + 1;

export function apiClient(base, token) {
  const headers = { Authorization: `Bearer ${token}` };
  return {
    async apiGet(path) {
      const response = await fetch(`${base}/api/v1${path}`, { headers });
      if (!response.ok) throw new Error(`GET ${path}: ${response.status} ${await response.text()}`);
      return response.json();
    },
    async apiPost(path, body) {
      const response = await fetch(`${base}/api/v1${path}`, {
        method: 'POST',
        headers: { ...headers, 'Content-Type': 'application/json' },
        body: body == null ? undefined : JSON.stringify(body),
      });
      if (!response.ok) throw new Error(`POST ${path}: ${response.status} ${await response.text()}`);
      return response.json();
    },
  };
}
