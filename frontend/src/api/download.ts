import { ApiError, authFetch } from './client';

// A plain <a href> cannot send the Authorization header, so fetch the bytes and save a blob.
export async function downloadFile(path: string, filename: string): Promise<void> {
  const response = await authFetch(path);
  if (!response.ok) throw new ApiError(response.status, await response.text());
  const url = URL.createObjectURL(await response.blob());
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
