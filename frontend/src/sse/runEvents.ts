import type { Sample, ShownLogLine } from '../api/types';
import type { SseEvent } from './parser';

/** A metrics message holds one of these per key: the key's new points as columns, index for index. */
export interface LiveColumns {
  key: string;
  step: number[];
  value: Array<number | string>; // NaN and infinities as strings
  time: number[];
}

/** How a key's columns travel (docs/api.md): times as milliseconds after the key's first point's, in seconds. */
export interface WireColumns {
  key: string;
  step: number[];
  value: Array<number | string>;
  time0: number;
  time_ms: number[];
}

export function liveColumns(wire: readonly WireColumns[]): LiveColumns[] {
  return wire.map(({ key, step, value, time0, time_ms }) => ({
    key,
    step,
    value,
    time: time_ms.map((ms) => time0 + ms / 1000),
  }));
}

export interface RunEventMap {
  hello: { run_id: number; status: string; last_step: number | null };
  status: Array<Record<string, unknown>>;
  metrics: LiveColumns[];
  // What the stream sends (docs/api.md): a log line as the logs view reads it; a sample's id and step only,
  // the samples view refetching what it shows.
  logs: ShownLogLine[];
  samples: Array<Pick<Sample, 'id' | 'step'>>;
  deleted: { run_id: number };
}

export type RunEventName = keyof RunEventMap;
type Listener<K extends RunEventName> = (data: RunEventMap[K]) => void;

/**
 * Fans one run's SSE connection out to whichever tabs are mounted, so switching tabs
 * neither opens a second stream nor loses the cursor.
 */
export class RunEventBus {
  private listeners = new Map<RunEventName, Set<Listener<RunEventName>>>();

  on<K extends RunEventName>(name: K, fn: Listener<K>): () => void {
    let set = this.listeners.get(name);
    if (!set) this.listeners.set(name, (set = new Set()));
    set.add(fn as Listener<RunEventName>);
    return () => set.delete(fn as Listener<RunEventName>);
  }

  emit(event: SseEvent): void {
    const set = this.listeners.get(event.event as RunEventName);
    if (!set || set.size === 0) return;
    let data: unknown;
    try {
      data = JSON.parse(event.data);
      if (event.event === 'metrics') data = liveColumns(data as WireColumns[]);
    } catch {
      return; // a malformed message must not break the stream
    }
    for (const fn of set) fn(data as never);
  }
}
