import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { AXIS_FONT, yAxisSize } from '../../charts/axes';
import { formatTicks } from '../../lib/format';
import { resolveColor, useThemeAttribute } from '../../lib/theme';
import type { ChartSeries } from './usage';

interface Props {
  x: readonly number[];
  series: readonly ChartSeries[];
  interval: 'hour' | 'day';
  height?: number;
}

/** GPU hours per bucket, a line per key. A few dozen points: rebuilt whenever the report or the theme changes. */
export function UsageChart({ x, series, interval, height = 240 }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const theme = useThemeAttribute();

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const muted = resolveColor('var(--fg-muted)');
    const grid = { stroke: resolveColor('var(--grid)') };
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height,
      scales: {
        x: { time: true },
        // Hours used start at zero; an all-zero period still gets an axis.
        y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
      },
      axes: [
        { stroke: muted, grid, font: AXIS_FONT },
        {
          stroke: muted,
          grid,
          font: AXIS_FONT,
          values: (_u, splits) => formatTicks(splits),
          size: (_u, values) => yAxisSize(values),
        },
      ],
      series: [
        { label: interval },
        ...series.map((s) => ({
          label: s.label,
          stroke: resolveColor(s.color),
          width: 1.5,
          value: (_u: uPlot, v: number | null) => (v == null ? '—' : `${v.toFixed(2)} h`),
        })),
      ],
      legend: { live: true },
    };
    const u = new uPlot(opts, [[...x], ...series.map((s) => s.values)], el);
    const resize = new ResizeObserver(() => u.setSize({ width: Math.max(200, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      u.destroy();
    };
  }, [x, series, interval, height, theme]);

  return (
    <figure className="chart usage-chart">
      <figcaption>
        <span className="chart-key">GPU hours per {interval}</span>
      </figcaption>
      <div ref={box} className="chart-canvas" data-testid="usage-chart" data-series={series.length} data-points={x.length} />
    </figure>
  );
}
