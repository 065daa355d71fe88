import { useMemo } from 'react';
import { Link, useNavigate, useSearchParams } from 'react-router';
import type { RunDetail } from '../../api/types';
import { ChartControls, parseSmoothing } from '../../charts/ChartControls';
import { runColor } from './colors';
import { CompareCharts } from './CompareCharts';
import { CompareSamples } from './CompareSamples';
import { FinalValues } from './FinalValues';
import type { ComparedLine } from './compareStore';
import { Legend } from './Legend';
import { parseRunIds, toSearch, withRunIds } from './params';
import { parseView, type CompareView } from './samplesParams';
import { SpecDiff } from './SpecDiff';
import { useCompareData } from './useCompareData';
import { useShallowStable } from './useShallowStable';
import './compare.css';

const VIEWS: ReadonlyArray<[CompareView, string]> = [
  ['charts', 'Charts'],
  ['samples', 'Samples'],
];

/** Charts or samples, as links: each view keeps the rest of the URL and has its own shareable address. */
function ViewSwitch({ view, params }: { view: CompareView; params: URLSearchParams }) {
  const searchFor = (v: CompareView) => {
    const next = new URLSearchParams(params);
    if (v === 'charts') next.delete('view');
    else next.set('view', v);
    return toSearch(next);
  };
  return (
    <nav className="tabs" aria-label="Compare views" data-testid="compare-view-switch">
      {VIEWS.map(([v, label]) => (
        <Link key={v} to={{ search: searchFor(v) }} data-view={v} className={v === view ? 'active' : undefined} aria-current={v === view ? 'page' : undefined}>
          {label}
        </Link>
      ))}
    </nav>
  );
}

export function ComparePage() {
  const [params] = useSearchParams();
  const { ids, invalid } = useMemo(() => parseRunIds(params.get('runs')), [params]);
  const smoothing = parseSmoothing(params.get('smooth'));
  const logScale = params.get('log') === '1';
  const search = params.get('search') ?? '';
  const view = parseView(params.get('view'));
  const runs = useCompareData(ids);

  const navigate = useNavigate();
  const go = (next: URLSearchParams, replace: boolean) => navigate({ search: toSearch(next) }, { replace });
  const setParam = (name: string, value: string | null) => {
    const next = new URLSearchParams(params);
    if (value == null || value === '') next.delete(name);
    else next.set(name, value);
    go(next, true);
  };
  const setIds = (next: number[]) => go(withRunIds(params, next), false);

  // Runs that failed to load keep their colour (by URL position) but get no line on the charts.
  const charted = runs.map((r, i) => ({ r, color: runColor(i) })).filter(({ r }) => r.run != null && r.error == null);
  const keys = useShallowStable(charted.map(({ r }) => r.keys));
  const legendKey = charted.map(({ r, color }) => `${r.id}:${r.run?.name ?? ''}:${color}`).join(',');
  const lines = useMemo<ComparedLine[]>(
    () => charted.map(({ r, color }) => ({ id: r.id, label: `#${r.id} ${r.run?.name ?? ''}`.trim(), color })),
    [legendKey], // eslint-disable-line react-hooks/exhaustive-deps
  );
  const details = useShallowStable(runs.map((r) => r.run).filter((r): r is RunDetail => r != null));
  const finals = charted.flatMap(({ r }) => (r.run && r.keys ? [{ run: r.run, keys: r.keys }] : []));

  return (
    <div className="compare-page">
      <h1>Compare runs</h1>
      {invalid.length > 0 && (
        <p role="alert" className="error">
          Ignored {invalid.map((t) => `"${t}"`).join(', ')} in runs=: run ids are positive whole numbers.
        </p>
      )}
      {ids.length < 2 && (
        <p className="compare-hint">
          Pick at least two runs on the <Link to="/runs">Runs page</Link> (tick them, then Compare), or add them by id below.
        </p>
      )}
      <Legend runs={runs} onRemove={(id) => setIds(ids.filter((x) => x !== id))} onAdd={(id) => setIds([...ids, id])} />
      {ids.length >= 2 && <ViewSwitch view={view} params={params} />}
      {ids.length >= 2 && view === 'samples' && <CompareSamples runs={runs} />}
      {ids.length >= 2 && view === 'charts' && (
        <>
          <ChartControls id="compare-smoothing" smoothing={smoothing} logScale={logScale} onParam={setParam} />
          {details.length >= 2 && <SpecDiff runs={details} />}
          <FinalValues runs={finals} />
          <CompareCharts
            lines={lines}
            keys={keys}
            smoothing={smoothing}
            logScale={logScale}
            search={search}
            onSearch={(q) => setParam('search', q)}
          />
        </>
      )}
    </div>
  );
}
