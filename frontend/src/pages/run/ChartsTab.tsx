import { useMemo, useSyncExternalStore } from 'react';
import { useSearchParams } from 'react-router';
import { ErrorNote } from '../../components/ErrorNote';
import { ChartControls, parseSmoothing } from '../../charts/ChartControls';
import { MetricChart } from '../../charts/MetricChart';
import { groupPanels } from '../../charts/panels';
import { useRunContext } from './context';

export function ChartsTab() {
  const {
    metrics: { store, loaded, error },
  } = useRunContext();
  const [params, setParams] = useSearchParams();
  const smoothing = parseSmoothing(params.get('smooth'));
  const logScale = params.get('log') === '1';
  const xBy = params.get('x') === 'time' ? 'time' : 'step';
  const setParam = (name: string, value: string | null) =>
    setParams(
      (prev) => {
        const next = new URLSearchParams(prev);
        if (value == null) next.delete(name);
        else next.set(name, value);
        return next;
      },
      { replace: true },
    );

  const keysVersion = useSyncExternalStore(
    (fn) => store.subscribeKeys(fn),
    () => store.keys().length,
  );
  const panels = useMemo(() => groupPanels(store.keys()), [store, keysVersion]); // eslint-disable-line react-hooks/exhaustive-deps

  return (
    <div className="charts-tab">
      <ChartControls id="smoothing" smoothing={smoothing} logScale={logScale} onParam={setParam}>
        <label htmlFor="x-axis">X axis</label>
        <select id="x-axis" value={xBy} onChange={(e) => setParam('x', e.target.value === 'time' ? 'time' : null)}>
          <option value="step">Step</option>
          <option value="time">Time</option>
        </select>
      </ChartControls>
      <ErrorNote error={error} />
      {loaded && panels.length === 0 && <p className="muted">No metrics yet; charts appear when the first points arrive.</p>}
      {panels.map((panel) => (
        <section key={panel.title} className="panel" aria-label={panel.title}>
          <h2>{panel.title}</h2>
          <div className="chart-grid">
            {panel.keys.map((key) => (
              <MetricChart key={key} metricKey={key} store={store} smoothing={smoothing} logScale={logScale} xBy={xBy} />
            ))}
          </div>
        </section>
      ))}
    </div>
  );
}
