import { useSyncExternalStore } from 'react';
import { useSearchParams } from 'react-router';
import { ErrorNote } from '../../components/ErrorNote';
import { ChartControls, parseSmoothing } from '../../charts/ChartControls';
import { ChartPanels } from '../../charts/ChartPanels';
import { runDecoding } from '../../lib/decoding';
import { useRunContext } from './context';

export function ChartsTab() {
  const {
    run,
    metrics: { store, loaded, error },
  } = useRunContext();
  const [params, setParams] = useSearchParams();
  const smoothing = parseSmoothing(params.get('smooth'));
  const logScale = params.get('log') === '1';
  const xBy = params.get('x') === 'time' ? 'time' : 'step';
  const search = params.get('search') ?? '';
  const setParam = (name: string, value: string | null) =>
    setParams(
      (prev) => {
        const next = new URLSearchParams(prev);
        if (value == null || value === '') next.delete(name);
        else next.set(name, value);
        return next;
      },
      { replace: true },
    );

  // The store hands out a new key list (and duplicates map) only when they change.
  const keys = useSyncExternalStore(
    (fn) => store.subscribeKeys(fn),
    () => store.keys(),
  );
  const duplicates = useSyncExternalStore(
    (fn) => store.subscribeKeys(fn),
    () => store.duplicates(),
  );

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
      {loaded && keys.length === 0 && <p className="muted">No metrics yet; charts appear when the first points arrive.</p>}
      {keys.length > 0 && (
        <ChartPanels
          source={store}
          keys={keys}
          duplicates={duplicates}
          search={search}
          onSearch={(q) => setParam('search', q)}
          smoothing={smoothing}
          logScale={logScale}
          xBy={xBy}
          decoding={runDecoding(run.config)}
        />
      )}
    </div>
  );
}
