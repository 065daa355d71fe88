import { useEffect, useMemo, useRef, useState } from 'react';
import { api, unwrap } from '../../api/client';
import type { LogLine } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { useRunContext } from './context';
import { clockTime, ERROR_PATTERN, filterLines, fullTime, mergeLines } from './logLines';

const TAIL = 500;

export function LogsTab() {
  const { run, bus } = useRunContext();
  const [lines, setLines] = useState<LogLine[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [rank, setRank] = useState<number | null>(null);
  const [search, setSearch] = useState('');
  const [follow, setFollow] = useState(true);
  const box = useRef<HTMLDivElement>(null);

  useEffect(() => {
    // Live lines that beat the tail request wait here, then merge by id.
    let early: LogLine[] | null = [];
    const off = bus.on('logs', (incoming) => {
      if (early) early.push(...incoming);
      else setLines((held) => mergeLines(held, incoming));
    });
    let cancelled = false;
    unwrap(api.GET('/api/v1/runs/{run_id}/logs', { params: { path: { run_id: run.id }, query: { tail: TAIL } } }))
      .then((page) => {
        if (cancelled) return;
        setLines(mergeLines(page.data, early ?? []));
        early = null;
      })
      .catch((err: unknown) => !cancelled && setError(err));
    return () => {
      cancelled = true;
      off();
    };
  }, [bus, run.id]);

  const shown = useMemo(() => filterLines(lines, rank, search), [lines, rank, search]);
  const ranks = useMemo(() => [...new Set(lines.map((l) => l.rank))].sort((a, b) => a - b), [lines]);

  useEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [shown, follow]);

  const jumpToError = () => {
    const first = shown.find((l) => ERROR_PATTERN.test(l.text));
    if (!first || !box.current) return;
    setFollow(false);
    const el = box.current.querySelector<HTMLElement>(`[data-line-id="${first.id}"]`);
    el?.scrollIntoView({ block: 'center' });
    el?.focus();
  };
  const hasError = shown.some((l) => ERROR_PATTERN.test(l.text));

  return (
    <div className="logs-tab">
      <form className="log-controls" onSubmit={(e) => e.preventDefault()}>
        <label htmlFor="log-rank">Rank</label>
        <select id="log-rank" value={rank ?? ''} onChange={(e) => setRank(e.target.value === '' ? null : Number(e.target.value))}>
          <option value="">All</option>
          {ranks.map((r) => (
            <option key={r} value={r}>
              {r}
            </option>
          ))}
        </select>
        <label htmlFor="log-search">Search</label>
        <input id="log-search" type="search" value={search} onChange={(e) => setSearch(e.target.value)} />
        <label className="check">
          <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.target.checked)} />
          Follow
        </label>
        <button type="button" onClick={jumpToError} disabled={!hasError}>
          Jump to first error
        </button>
        <span className="muted">
          {shown.length} of {lines.length} lines (last {TAIL} and live)
        </span>
      </form>
      <ErrorNote error={error} />
      <div className="log-box" ref={box} role="log" aria-label="Run logs" data-lines={shown.length}>
        {shown.map((l) => (
          <div key={l.id} data-line-id={l.id} tabIndex={-1} className={ERROR_PATTERN.test(l.text) ? 'log-line err' : 'log-line'}>
            <time className="log-time" dateTime={new Date(l.time * 1000).toISOString()} title={fullTime(l.time)}>
              {clockTime(l.time)}
            </time>{' '}
            {ranks.length > 1 && <span className="rank">[rank {l.rank}] </span>}
            {l.text}
          </div>
        ))}
      </div>
    </div>
  );
}
