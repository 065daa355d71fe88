import { useEffect, useRef, useState, type ReactNode } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { resolveColor, useThemeAttribute } from '../lib/theme';
import { MetricTitle } from './MetricTitle';
import { describeNonFinite } from './nonFinite';
import { buildPlot, type Plot } from './plotData';
import { plotOptions } from './plotOptions';
import type { ChartSource } from './source';

interface Props {
  source: ChartSource;
  metricKey: string;
  /** The smoothing slider's weight; sparse keys ignore it (smoothing.ts). */
  smoothing: number;
  logScale: boolean;
  /** Several runs share a step axis only. */
  xBy: 'step' | 'time';
  /** Keys whose series are identical to this one, drawn here instead of twice. */
  same?: readonly string[];
  /** Buttons for the caption (pin). */
  actions?: ReactNode;
  height?: number;
  /** How the run's eval answers were drawn; an accuracy's title says it. */
  decoding?: string | null;
}

/**
 * The one uPlot wrapper, for the run page and Compare. Built once per (lines drawn, scale type,
 * theme) and fed with setData otherwise. A live point calls setData(data, !zoomed), as
 * Determined's wrapper does, so a drag-zoom survives it; double-click zooms back out.
 */
export function MetricChart({ source, metricKey, smoothing, logScale, xBy, same, actions, height = 200, decoding }: Props) {
  const box = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const zoom = useRef<{ zoomed: boolean; x?: { min: number; max: number } }>({ zoomed: false });
  const theme = useThemeAttribute();
  const multi = source.lines(metricKey).length > 1;
  const axis = multi ? 'step' : xBy;

  // Before the history arrives the key list's point count decides the lines (smoothed? a band?),
  // so the chart is built while the request is on the way and its first build is its last.
  const compute = (): Plot => buildPlot(metricKey, source.lines(metricKey), axis, logScale, smoothing);
  const [initial] = useState(compute);
  const plot = useRef<Plot>(initial);
  const [shapeKey, setShapeKey] = useState(initial.shapeKey);
  const [note, setNote] = useState<string | null>(null);

  // data-* attributes say what is on the canvas: the e2e checks and bench/dashboard.py read them.
  const markDrawn = () => {
    const el = box.current;
    const p = plot.current;
    if (!el) return;
    el.dataset.points = String(p.points);
    el.dataset.series = String(source.lines(metricKey).filter((l) => l.buf && l.buf.steps.length > 0).length);
    el.dataset.smoothing = String(p.lines.some((l) => l.smoothed) ? smoothing : 0);
    el.dataset.bands = String(p.lines.filter((l) => l.band).length);
    el.dataset.loaded = String(source.loaded(metricKey));
    const last = p.lastStep == null ? '' : String(p.lastStep);
    // uPlot paints on the next frame; the attribute follows it so a reader sees drawn points only.
    requestAnimationFrame(() => {
      if (box.current) box.current.dataset.lastStep = last;
    });
  };

  const refresh = () => {
    const p = (plot.current = compute());
    const lines = source.lines(metricKey);
    const text = lines.length === 1 ? describeNonFinite(lines[0]!.buf) : describeMany(lines.map((l) => [l.label, describeNonFinite(l.buf)]));
    setNote(text);
    const u = chart.current;
    if (!u || p.shapeKey !== shapeKey) {
      setShapeKey(p.shapeKey); // rebuilt by the effect below, with this data
      return;
    }
    if (zoom.current.zoomed) {
      const { min, max } = u.scales.x!;
      u.setData(p.data, false);
      if (min != null && max != null) u.setScale('x', { min, max }); // re-fits y to the window, then draws
    } else {
      u.setData(p.data);
    }
    markDrawn();
  };
  const refreshRef = useRef(refresh);
  refreshRef.current = refresh;

  useEffect(() => {
    const off = source.subscribe(metricKey, () => refreshRef.current());
    source.request(metricKey);
    refreshRef.current(); // whatever arrived between the first render and the subscription
    return off;
  }, [source, metricKey]);

  useEffect(() => refreshRef.current(), [smoothing, logScale, axis]);

  // A zoom means nothing on another axis kind.
  useEffect(() => {
    zoom.current = { zoomed: false };
  }, [axis, logScale]);

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const ticks: [string[], string[]] = [[], []];
    const opts = plotOptions(plot.current.lines, {
      width: Math.max(200, el.clientWidth),
      height,
      xBy: axis,
      logScale,
      color: resolveColor,
      spans: () => plot.current.spans,
      ticks,
      onZoom: () => {
        zoom.current.zoomed = true;
      },
    });
    opts.hooks!.draw!.push((u) => {
      el.dataset.xTicks = ticks[0].join('|');
      el.dataset.yTicks = ticks[1].join('|');
      el.dataset.yAxisPx = String(Math.round(u.bbox.left / (u.ctx.canvas.width / u.width || 1)));
      el.dataset.xRange = `${u.scales.x!.min ?? ''},${u.scales.x!.max ?? ''}`;
      el.dataset.zoomed = String(zoom.current.zoomed);
    });
    const u = new uPlot(opts, plot.current.data, el);
    chart.current = u;
    el.dataset.theme = theme;
    const saved = zoom.current.x; // kept across a rebuild (theme toggle, a line gaining its smoothed twin)
    if (zoom.current.zoomed && saved) u.setScale('x', saved);
    const unzoom = () => {
      zoom.current = { zoomed: false };
      el.dataset.zoomed = 'false';
    };
    u.over.addEventListener('dblclick', unzoom);
    markDrawn();
    const resize = new ResizeObserver(() => u.setSize({ width: Math.max(200, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      const { min, max } = u.scales.x!;
      if (zoom.current.zoomed && min != null && max != null) zoom.current.x = { min, max };
      resize.disconnect();
      u.over.removeEventListener('dblclick', unzoom);
      u.destroy();
      chart.current = null;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps -- rebuilt only when what is drawn changes, not for new points
  }, [shapeKey, theme, logScale, axis, height]);

  return (
    <figure className="chart">
      <figcaption>
        <MetricTitle metricKey={metricKey} decoding={decoding} />
        {same && same.length > 0 && <span className="chart-same">= {same.join(' = ')} (same values)</span>}
        {note && (
          <span className="chart-note" role="note">
            {note}
          </span>
        )}
        {actions}
      </figcaption>
      <div ref={box} className="chart-canvas" data-chart={metricKey} data-points="0" data-nonfinite={note ?? undefined} />
    </figure>
  );
}

function describeMany(notes: Array<[string, string | null]>): string | null {
  const said = notes.filter(([, n]) => n != null).map(([label, n]) => `${label}: ${n}`);
  return said.length ? said.join('; ') : null;
}
