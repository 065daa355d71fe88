import { ApiError, authFetch } from './client';

/**
 * Follow a URL as a download, as a plain link would: the browser streams it to disk with its own download manager,
 * nothing of it passes through the page. For URLs that need no Authorization header (a signed link, a blob).
 */
export function saveFromUrl(url: string, filename: string): void {
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
}

// A plain <a href> cannot send the Authorization header, so fetch the bytes and save a blob: for small files only
// (the whole file is held in the page); large ones get a signed link (POST .../download-url) and saveFromUrl.
export async function downloadFile(path: string, filename: string): Promise<void> {
  const response = await authFetch(path);
  if (!response.ok) throw new ApiError(response.status, await response.text());
  const url = URL.createObjectURL(await response.blob());
  saveFromUrl(url, filename);
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
