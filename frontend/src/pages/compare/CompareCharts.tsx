import { useEffect, useMemo, useSyncExternalStore } from 'react';
import type { KeySummary } from '../../api/types';
import { ChartPanels } from '../../charts/ChartPanels';
import { fetchCompareSeries } from './compareApi';
import { CompareStore, type ComparedLine } from './compareStore';

interface Props {
  /** The runs with a line on the charts, in legend order. */
  lines: readonly ComparedLine[];
  /** Each of those runs' key list (undefined while loading). */
  keys: ReadonlyArray<KeySummary[] | undefined>;
  smoothing: number;
  logScale: boolean;
  search: string;
  onSearch: (query: string) => void;
}

/** Compare's charts: the run page's panels, search, pins and chart, with a line per run. */
export function CompareCharts({ lines, keys, smoothing, logScale, search, onSearch }: Props) {
  const store = useMemo(() => new CompareStore(fetchCompareSeries), []);
  useEffect(() => store.setRuns(lines), [store, lines]);
  // Every run's list in one go: the keys a poll shows gained points, in all runs, are then one request.
  useEffect(() => {
    store.setKeyLists(lines.flatMap((line, i) => (keys[i] ? [[line.id, keys[i]] as const] : [])));
  }, [store, lines, keys]);
  const keyList = useSyncExternalStore(
    (fn) => store.subscribeKeys(fn),
    () => store.keys(),
  );
  const duplicates = useSyncExternalStore(
    (fn) => store.subscribeKeys(fn),
    () => store.duplicates(),
  );
  if (keys.every((k) => k === undefined)) return null;
  if (keyList.length === 0) return <p className="muted">None of these runs has logged metrics yet.</p>;
  return (
    <ChartPanels
      source={store}
      keys={keyList}
      duplicates={duplicates}
      search={search}
      onSearch={onSearch}
      smoothing={smoothing}
      logScale={logScale}
      xBy="step"
    />
  );
}
