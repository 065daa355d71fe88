import type { LogLine } from '../../api/types';

export const MAX_LINES = 5000;
export const ERROR_PATTERN = /error|traceback|exception/i;

/** Appends lines newer than the last one held (the tail and the stream overlap), keeping at most `max`. */
export function mergeLines(held: readonly LogLine[], incoming: readonly LogLine[], max = MAX_LINES): LogLine[] {
  const lastId = held.length ? held[held.length - 1]!.id : 0;
  const fresh = incoming.filter((l) => l.id > lastId).sort((a, b) => a.id - b.id);
  if (!fresh.length) return held as LogLine[];
  const all = [...held, ...fresh];
  return all.length > max ? all.slice(all.length - max) : all;
}

export function filterLines(lines: readonly LogLine[], rank: number | null, search: string): LogLine[] {
  const needle = search.toLowerCase();
  return lines.filter((l) => (rank == null || l.rank === rank) && (!needle || l.text.toLowerCase().includes(needle)));
}
