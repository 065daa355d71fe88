import { useMemo } from 'react';
import type { Series } from '../../api/types';
import { OverlayChart, type OverlaySeries } from '../../charts/OverlayChart';
import { groupPanels } from '../../charts/panels';
import { useShallowStable } from './useShallowStable';
import { alignRuns, runsWithData, seriesByKey, shapeForChart } from './align';

interface Props {
  /** Each run's series, in legend order; `undefined` while loading or on error. */
  perRun: ReadonlyArray<Series[] | undefined>;
  legend: readonly OverlaySeries[];
  smoothing: number;
  logScale: boolean;
}

export function CompareCharts({ perRun, legend, smoothing, logScale }: Props) {
  const byKey = useMemo(() => seriesByKey(perRun), [perRun]);
  const panels = useMemo(() => groupPanels([...byKey.keys()]), [byKey]);
  if (perRun.every((s) => s === undefined)) return null;
  if (panels.length === 0) return <p className="muted">None of these runs has logged metrics yet.</p>;
  return (
    <>
      {panels.map((panel) => (
        <section key={panel.title} className="panel" aria-label={panel.title}>
          <h2>{panel.title}</h2>
          <div className="chart-grid">
            {panel.keys.map((key) => (
              <KeyChart key={key} metricKey={key} series={byKey.get(key)!} legend={legend} smoothing={smoothing} logScale={logScale} />
            ))}
          </div>
        </section>
      ))}
    </>
  );
}

interface KeyChartProps {
  metricKey: string;
  series: Array<Series | undefined>;
  legend: readonly OverlaySeries[];
  smoothing: number;
  logScale: boolean;
}

function KeyChart({ metricKey, series, legend, smoothing, logScale }: KeyChartProps) {
  // seriesByKey builds new arrays when any run refetches; realign only when this key's series change.
  const stable = useShallowStable(series);
  const aligned = useMemo(() => alignRuns(stable.map((s) => s?.points)), [stable]);
  const data = useMemo(() => shapeForChart(aligned, smoothing, logScale), [aligned, smoothing, logScale]);
  return (
    <OverlayChart metricKey={metricKey} series={legend} data={data} logScale={logScale} seriesWithData={runsWithData(stable)} />
  );
}
