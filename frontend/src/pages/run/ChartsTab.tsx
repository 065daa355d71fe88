import { useMemo, useSyncExternalStore } from 'react';
import { useSearchParams } from 'react-router';
import { ErrorNote } from '../../components/ErrorNote';
import { MetricChart } from '../../charts/MetricChart';
import { groupPanels } from '../../charts/panels';
import { useRunContext } from './context';

export function ChartsTab() {
  const {
    metrics: { store, loaded, error },
  } = useRunContext();
  const [params, setParams] = useSearchParams();
  const smoothing = Math.min(0.99, Math.max(0, Number(params.get('smooth') ?? 0.6) || 0));
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
      <form className="chart-controls" onSubmit={(e) => e.preventDefault()}>
        <label htmlFor="smoothing">
          Smoothing <output htmlFor="smoothing">{smoothing.toFixed(2)}</output>
        </label>
        <input
          id="smoothing"
          type="range"
          min={0}
          max={0.99}
          step={0.01}
          value={smoothing}
          onChange={(e) => setParam('smooth', e.target.value)}
        />
        <label className="check">
          <input type="checkbox" checked={logScale} onChange={(e) => setParam('log', e.target.checked ? '1' : null)} />
          Log scale
        </label>
        <label htmlFor="x-axis">X axis</label>
        <select id="x-axis" value={xBy} onChange={(e) => setParam('x', e.target.value === 'time' ? 'time' : null)}>
          <option value="step">Step</option>
          <option value="time">Time</option>
        </select>
      </form>
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
