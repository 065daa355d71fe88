import { useEffect, useRef, useSyncExternalStore } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { formatNumber } from '../lib/format';

export interface OverlaySeries {
  label: string;
  /** A CSS colour or `var(--name)`; resolved against the current theme when the chart is built. */
  color: string;
}

interface Props {
  metricKey: string;
  series: readonly OverlaySeries[];
  /** `[x, ...one column per series]`, all the same length (see alignRuns). */
  data: ReadonlyArray<ReadonlyArray<number | null>>;
  logScale: boolean;
  /** How many series actually have points: written to `data-series` for tests and readers. */
  seriesWithData: number;
  height?: number;
}

/**
 * The non-null value nearest to `idx` (the left one on a tie), or null outside the series'
 * first..last point, so a finished run shows no value past its end.
 */
export function nearestValue(column: ReadonlyArray<number | null | undefined>, idx: number): number | null {
  if (column[idx] != null) return column[idx];
  let left = idx - 1;
  while (left >= 0 && column[left] == null) left--;
  let right = idx + 1;
  while (right < column.length && column[right] == null) right++;
  if (left < 0 || right >= column.length) return null;
  return idx - left <= right - idx ? column[left]! : column[right]!;
}

function resolveColor(color: string): string {
  const m = /^var\((--[\w-]+)\)$/.exec(color.trim());
  if (!m) return color;
  return getComputedStyle(document.documentElement).getPropertyValue(m[1]!).trim() || '#888';
}

// The theme toggle flips `data-theme` on <html>; charts rebuild so axes and lines follow it.
function subscribeTheme(notify: () => void): () => void {
  const observer = new MutationObserver(notify);
  observer.observe(document.documentElement, { attributes: true, attributeFilter: ['data-theme'] });
  return () => observer.disconnect();
}
const themeSnapshot = () => document.documentElement.dataset.theme ?? '';

/**
 * Several runs' lines for one metric on one uPlot. Built once per (series set, scale type,
 * theme) and fed with setData otherwise, so polling and the smoothing slider never rebuild it.
 */
export function OverlayChart({ metricKey, series, data, logScale, seriesWithData, height = 220 }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const dataRef = useRef(data);
  dataRef.current = data;
  const theme = useSyncExternalStore(subscribeTheme, themeSnapshot);
  const identity = series.map((s) => `${s.label}\u0000${s.color}`).join('\u0001');

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const muted = resolveColor('var(--fg-muted)');
    const grid = resolveColor('var(--grid)');
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height,
      scales: { x: { time: false }, y: logScale ? { distr: 3 } : {} },
      axes: [
        { stroke: muted, grid: { stroke: grid } },
        {
          stroke: muted,
          grid: { stroke: grid },
          size: 70,
          values: (_u, splits) => splits.map((v) => (v == null ? '' : formatNumber(v))),
        },
      ],
      series: [
        { label: 'step' },
        ...series.map((s) => ({
          label: s.label,
          stroke: resolveColor(s.color),
          width: 2,
          spanGaps: true,
          // Runs log at different steps; between a run's own points, hover shows its nearest value.
          value: (u: uPlot, v: number | null, si: number, idx: number | null) =>
            formatNumber(v ?? (idx == null ? null : nearestValue(u.data[si] as ReadonlyArray<number | null>, idx))),
        })),
      ],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
    };
    plot.current = new uPlot(opts, dataRef.current as uPlot.AlignedData, el);
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(200, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps -- rebuilt only when the series set, scale or theme changes
  }, [identity, logScale, theme, height]);

  useEffect(() => {
    plot.current?.setData(data as uPlot.AlignedData);
  }, [data]);

  return (
    <figure className="chart">
      <figcaption>{metricKey}</figcaption>
      <div
        ref={box}
        className="chart-canvas"
        data-chart={metricKey}
        data-series={seriesWithData}
        data-points={data[0]?.length ?? 0}
      />
    </figure>
  );
}
