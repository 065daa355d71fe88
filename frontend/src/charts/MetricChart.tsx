import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { formatNumber } from '../lib/format';
import { ema } from './ema';
import type { MetricStore } from './store';
import { xValues, yValues, type ChartOptions } from './series';

interface Props extends ChartOptions {
  metricKey: string;
  store: MetricStore;
  smoothing: number;
}

function cssVar(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

/**
 * One uPlot chart. It is built once per (key, axis kind) and then only fed with setData,
 * so live points and smoothing changes never rebuild the canvas.
 */
export function MetricChart({ metricKey, store, smoothing, xBy, logScale }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const smoothingRef = useRef(smoothing);
  smoothingRef.current = smoothing;

  const dataFor = (): uPlot.AlignedData => {
    const buf = store.get(metricKey) ?? { steps: [], times: [], values: [] };
    const ys = yValues(buf, logScale);
    return [xValues(buf, xBy), ys, ema(ys, smoothingRef.current)] as uPlot.AlignedData;
  };

  const redraw = () => {
    const el = box.current;
    if (!plot.current || !el) return;
    plot.current.setData(dataFor());
    markDrawn(el);
  };

  // data-points / data-last-step say what is on the canvas: tests and bench/dashboard.py read them.
  const markDrawn = (el: HTMLElement) => {
    const steps = store.get(metricKey)?.steps ?? [];
    el.dataset.points = String(steps.length);
    const last = steps.length ? String(steps[steps.length - 1]) : '';
    // uPlot paints on the next frame; the attribute follows it so a reader sees drawn points only.
    requestAnimationFrame(() => {
      el.dataset.lastStep = last;
    });
  };

  // Build on mount and when the axis kind changes: uPlot fixes scale types at creation.
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const stroke = cssVar('--chart-line');
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth),
      height: 200,
      scales: { x: { time: xBy === 'time' }, y: logScale ? { distr: 3 } : {} },
      axes: [
        { stroke: cssVar('--fg-muted'), grid: { stroke: cssVar('--grid') } },
        {
          stroke: cssVar('--fg-muted'),
          grid: { stroke: cssVar('--grid') },
          size: 70,
          // uPlot's default rounds tiny values such as learning rates to 0.
          values: (_u, splits) => splits.map((v) => (v == null ? '' : formatNumber(v))),
        },
      ],
      series: [
        { label: xBy },
        { label: 'raw', stroke: cssVar('--chart-raw'), width: 1, value: (_u, v) => formatNumber(v) },
        { label: 'smoothed', stroke, width: 2, value: (_u, v) => formatNumber(v) },
      ],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
    };
    plot.current = new uPlot(opts, dataFor(), el);
    markDrawn(el);
    const unsubscribe = store.subscribe(metricKey, redraw);
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(200, el.clientWidth), height: 200 }));
    resize.observe(el);
    return () => {
      unsubscribe();
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps -- rebuilt only when the axis kind changes
  }, [store, metricKey, xBy, logScale]);

  useEffect(redraw, [smoothing]); // eslint-disable-line react-hooks/exhaustive-deps

  return (
    <figure className="chart">
      <figcaption>{metricKey}</figcaption>
      <div ref={box} className="chart-canvas" data-chart={metricKey} data-points="0" />
    </figure>
  );
}
