export function formatDate(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

export function formatDuration(startIso: string | null | undefined, endIso?: string | null, now = Date.now()): string {
  if (!startIso) return '—';
  const start = new Date(startIso).getTime();
  const end = endIso ? new Date(endIso).getTime() : now;
  let s = Math.max(0, Math.round((end - start) / 1000));
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
}

export function formatNumber(value: number | string | null | undefined): string {
  if (value == null) return '—';
  if (typeof value === 'string') return value; // NaN / Infinity as the API spells them
  if (value !== 0 && (Math.abs(value) >= 1e5 || Math.abs(value) < 1e-3)) return value.toExponential(3);
  return Number(value.toPrecision(4)).toString();
}

export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

/**
 * Labels for one axis' ticks in one notation, with as few digits as tell the ticks apart
 * ("1e-5", not "1.000e-5"): long labels are what get clipped at the chart's edge.
 * Exponents lose their "+" and keep their sign; a mantissa keeps its minus.
 */
export function formatTicks(splits: ReadonlyArray<number | null>, log = false): string[] {
  const finite = splits.filter((v): v is number => v != null && Number.isFinite(v));
  const biggest = finite.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  if (biggest === 0) return splits.map((v) => (v == null ? '' : '0'));
  const scientific = biggest >= 1e5 || biggest < 1e-3;
  const step = smallestGap(finite) || biggest;
  const close = (label: string, v: number) => Math.abs(Number(label) - v) <= step * 1e-6;
  // Fixed notation on a linear axis: one decimal count for every tick, so they line up; on a log
  // axis (0.001, 0.01, 0.1, 1) and in scientific notation: per tick.
  const shortest = (v: number, write: (v: number, digits: number) => string) => {
    for (let digits = 0; digits < 12; digits++) if (close(write(v, digits), v)) return digits;
    return 12;
  };
  const fixed = (v: number, digits: number) => v.toFixed(digits);
  const decimals = scientific || log ? 0 : Math.max(0, ...finite.map((v) => shortest(v, fixed)));
  const format = (v: number) => {
    if (scientific) return v.toExponential(shortest(v, (x, d) => x.toExponential(d)));
    return v.toFixed(log ? shortest(v, fixed) : decimals);
  };
  return splits.map((v) => {
    if (v == null || !Number.isFinite(v)) return '';
    if (Math.abs(v) < step * 1e-9) return '0'; // -0 and float noise around zero
    return format(v).replace('e+', 'e');
  });
}

function smallestGap(values: readonly number[]): number {
  let gap = Infinity;
  for (let i = 1; i < values.length; i++) {
    const d = Math.abs(values[i]! - values[i - 1]!);
    if (d > 0) gap = Math.min(gap, d);
  }
  return Number.isFinite(gap) ? gap : 0;
}

/** Step ticks: whole numbers, 12.5k and 3M past ten thousand so they stay short. */
export function formatStepTicks(splits: ReadonlyArray<number | null>): string[] {
  const biggest = splits.reduce<number>((m, v) => Math.max(m, Math.abs(v ?? 0)), 0);
  const [div, unit] = biggest >= 1e6 ? [1e6, 'M'] : biggest >= 1e4 ? [1e3, 'k'] : [1, ''];
  if (div === 1) return splits.map((v) => (v == null ? '' : String(Math.round(v))));
  return formatTicks(splits.map((v) => (v == null ? null : v / div))).map((s) => (s && s !== '0' ? s + unit : s));
}
