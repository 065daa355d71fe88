import type { ShownLogLine } from '../../api/types';

/** The most lines the page holds: a chatty run prints millions, and each held line costs memory and filtering. */
export const MAX_LINES = 5000;
export const ERROR_PATTERN = /error|traceback|exception/i;

export interface HeldLines {
  lines: ShownLogLine[];
  /** How many older lines were let go to stay under the cap. */
  dropped: number;
}

export const NO_LINES: HeldLines = { lines: [], dropped: 0 };

/** Appends lines newer than the last one held (the tail and the stream overlap), keeping at most `max`. */
export function mergeLines(held: HeldLines, incoming: readonly ShownLogLine[], max = MAX_LINES): HeldLines {
  const { lines } = held;
  const lastId = lines.length ? lines[lines.length - 1]!.id : 0;
  const fresh = incoming.filter((l) => l.id > lastId).sort((a, b) => a.id - b.id);
  if (!fresh.length) return held;
  const all = [...lines, ...fresh];
  const over = Math.max(0, all.length - max);
  return { lines: over ? all.slice(over) : all, dropped: held.dropped + over };
}

export function filterLines(lines: readonly ShownLogLine[], rank: number | null, search: string): ShownLogLine[] {
  const needle = search.toLowerCase();
  return lines.filter((l) => (rank == null || l.rank === rank) && (!needle || l.text.toLowerCase().includes(needle)));
}

const pad = (n: number) => String(n).padStart(2, '0');

/** When a line was printed, compact: HH:MM:SS in the browser's time zone (`time` is Unix seconds). */
export function clockTime(seconds: number): string {
  const d = new Date(seconds * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** The full date and time, to the millisecond, for the hover. */
export function fullTime(seconds: number): string {
  const d = new Date(seconds * 1000);
  const ms = String(d.getMilliseconds()).padStart(3, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clockTime(seconds)}.${ms}`;
}
