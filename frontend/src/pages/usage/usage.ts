import type { components } from '../../api/schema';
import { PALETTE_SIZE, runColor } from '../compare/colors';

export type UsageReport = components['schemas']['UsageReport'];
export type UsageRow = components['schemas']['UsageRow'];
export type UsageBy = UsageReport['by'];
type Interval = NonNullable<UsageReport['interval']>;

export const PERIODS = {
  '24h': { label: 'Last 24 hours', hours: 24, interval: 'hour' },
  '7d': { label: 'Last 7 days', hours: 7 * 24, interval: 'day' },
  '30d': { label: 'Last 30 days', hours: 30 * 24, interval: 'day' },
} as const satisfies Record<string, { label: string; hours: number; interval: Interval }>;
export type Period = keyof typeof PERIODS;

export const GROUPS: Record<UsageBy, string> = { project: 'Project', user: 'User', queue: 'Queue', run: 'Run' };

export const isPeriod = (v: string | null): v is Period => v != null && v in PERIODS;
export const isGroup = (v: string | null): v is UsageBy => v != null && v in GROUPS;

/** The query for a period ending `now`: computed when fetched, so a refetch or a download covers the period up to then. */
export function usageQuery(by: UsageBy, period: Period, now = Date.now()) {
  const { hours, interval } = PERIODS[period];
  return { since: new Date(now - hours * 3_600_000).toISOString(), until: new Date(now).toISOString(), by, interval };
}

export const hours = (seconds: number) => (seconds / 3600).toFixed(2);

export interface ChartSeries {
  label: string;
  color: string;
  /** GPU hours per bucket, one per `x`. */
  values: number[];
}

/**
 * GPU hours per bucket, one line per key with GPU use: the largest first (the API sorts them), as many as the palette
 * has colours, the rest summed into one "other" line so that a by-run report stays readable.
 */
export function chartSeries(rows: readonly UsageRow[]): { x: number[]; series: ChartSeries[] } {
  const used = rows.filter((r) => r.gpu_seconds > 0);
  const shown = used.length > PALETTE_SIZE ? used.slice(0, PALETTE_SIZE - 1) : used;
  const rest = used.slice(shown.length);
  const starts = new Set<number>();
  for (const r of used) for (const b of r.over_time ?? []) starts.add(Date.parse(b.start) / 1000);
  const x = [...starts].sort((a, b) => a - b);
  const at = new Map(x.map((t, i) => [t, i]));
  const line = (group: readonly UsageRow[]) => {
    const values = x.map(() => 0);
    for (const r of group) for (const b of r.over_time ?? []) values[at.get(Date.parse(b.start) / 1000)!]! += b.gpu_seconds / 3600;
    return values;
  };
  const series = shown.map((r, i) => ({ label: r.key, color: runColor(i), values: line([r]) }));
  if (rest.length > 0) series.push({ label: `other (${rest.length})`, color: runColor(PALETTE_SIZE - 1), values: line(rest) });
  return { x, series };
}
