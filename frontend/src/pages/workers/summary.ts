import type { components } from '../../api/schema';

export type Worker = components['schemas']['WorkerPublic'];
export type Gpu = components['schemas']['Gpu'];
export type GangPlace = components['schemas']['GangPlace'];

export interface QueueSummary {
  queue: string;
  workers: number;
  /** Fresh workers holding a run. */
  busy: number;
  /** Fresh workers without a run. */
  idle: number;
  /** No recent heartbeat: counted here only, not as busy or idle. */
  stale: number;
  gpus: number;
}

/** A worker holds a run even when the run is outside your projects (id hidden, status kept), or as a gang's node. */
export const isBusy = (w: Worker) => w.current_run_id != null || !!w.current_run_status || w.gang != null;

/** One row per queue, sorted by name; a worker serving several queues counts in each. */
export function summarizeQueues(workers: readonly Worker[]): QueueSummary[] {
  const rows = new Map<string, QueueSummary>();
  for (const w of workers) {
    for (const queue of new Set(w.queues)) {
      let row = rows.get(queue);
      if (!row) rows.set(queue, (row = { queue, workers: 0, busy: 0, idle: 0, stale: 0, gpus: 0 }));
      row.workers++;
      row.gpus += w.gpus.length;
      if (w.stale) row.stale++;
      else if (isBusy(w)) row.busy++;
      else row.idle++;
    }
  }
  return [...rows.values()].sort((a, b) => a.queue.localeCompare(b.queue));
}

/** Live workers first, so a dead one never sits between them; the API's order otherwise. */
export function liveFirst(workers: readonly Worker[]): Worker[] {
  return [...workers].sort((a, b) => Number(a.stale) - Number(b.stale));
}

/** "2 × NVIDIA H100 80GB HBM3" (or "1 × A, 1 × B" for a mixed box); "" without GPUs. */
export function gpuModels(gpus: readonly Gpu[]): string {
  const counts = new Map<string, number>();
  for (const g of gpus) counts.set(g.name, (counts.get(g.name) ?? 0) + 1);
  return [...counts].map(([name, n]) => `${n} × ${name}`).join(', ');
}

/** "12 s ago", "4 min ago", "3 h ago", "2 d ago". */
export function formatAgo(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) return `${s} s ago`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** "12.3 / 80.0 GiB" from MiB; "— / 80.0 GiB" when the worker does not report use. */
export function formatGpuMemory(usedMb: number | null | undefined, totalMb: number): string {
  const gib = (mb: number) => (mb / 1024).toFixed(1);
  return `${usedMb == null ? '—' : gib(usedMb)} / ${gib(totalMb)} GiB`;
}
