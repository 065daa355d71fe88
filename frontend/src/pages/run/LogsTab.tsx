import { useEffect, useLayoutEffect, useMemo, useRef, useState } from 'react';
import { api, unwrap } from '../../api/client';
import type { ShownLogLine } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { useVirtualRows } from '../../lib/virtualRows';
import { useRunContext } from './context';
import { clockTime, ERROR_PATTERN, filterLines, fullTime, MAX_LINES, mergeLines, NO_LINES } from './logLines';

const TAIL = 500;
/** Every line is one row this tall (styles.css .log-line): the window's arithmetic needs one height. */
const LINE_PX = 18;

function LogRow({ line, showRank }: { line: ShownLogLine; showRank: boolean }) {
  return (
    <div data-line-id={line.id} tabIndex={-1} className={ERROR_PATTERN.test(line.text) ? 'log-line err' : 'log-line'}>
      <time className="log-time" dateTime={new Date(line.time * 1000).toISOString()} title={fullTime(line.time)}>
        {clockTime(line.time)}
      </time>{' '}
      {showRank && <span className="rank">[rank {line.rank}] </span>}
      {line.text}
    </div>
  );
}

function Dropped({ count, runId }: { count: number; runId: number }) {
  return (
    <p className="muted" data-testid="logs-dropped">
      {count.toLocaleString('en')} older lines were dropped: this page keeps the last {MAX_LINES.toLocaleString('en')}. The
      whole log: <code>rlplane logs {runId}</code>, or <code>GET /api/v1/runs/{runId}/logs?offset=0</code> page by page.
    </p>
  );
}

export function LogsTab() {
  const { run, bus } = useRunContext();
  const [held, setHeld] = useState(NO_LINES);
  const [error, setError] = useState<unknown>(null);
  const [rank, setRank] = useState<number | null>(null);
  const [search, setSearch] = useState('');
  const [follow, setFollow] = useState(true);
  const [focusId, setFocusId] = useState<number | null>(null);
  const box = useRef<HTMLDivElement>(null);
  const { lines } = held;

  useEffect(() => {
    // Live lines that beat the tail request wait here, then merge by id.
    let early: ShownLogLine[] | null = [];
    const off = bus.on('logs', (incoming) => {
      if (early) early.push(...incoming);
      else setHeld((prev) => mergeLines(prev, incoming));
    });
    let cancelled = false;
    unwrap(api.GET('/api/v1/runs/{run_id}/logs', { params: { path: { run_id: run.id }, query: { tail: TAIL } } }))
      .then((page) => {
        if (cancelled) return;
        setHeld(mergeLines({ lines: page.data, dropped: 0 }, early ?? []));
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
  const firstError = useMemo(() => shown.findIndex((l) => ERROR_PATTERN.test(l.text)), [shown]);
  const rows = useVirtualRows(box, shown.length, LINE_PX);
  const { scrollTo } = rows;

  useLayoutEffect(() => {
    if (follow) scrollTo(Infinity);
  }, [shown, follow, scrollTo]);

  // The line jumped to is rendered only once the window has moved to it.
  useEffect(() => {
    if (focusId == null) return;
    const el = box.current?.querySelector<HTMLElement>(`[data-line-id="${focusId}"]`);
    if (!el) return;
    el.focus({ preventScroll: true });
    setFocusId(null);
  }, [focusId, rows.start]);

  const jumpToError = () => {
    if (firstError < 0) return;
    setFollow(false);
    scrollTo(firstError * LINE_PX - (rows.viewportPx - LINE_PX) / 2);
    setFocusId(shown[firstError]!.id);
  };

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
        <button type="button" onClick={jumpToError} disabled={firstError < 0}>
          Jump to first error
        </button>
        <span className="muted">
          {shown.length} of {lines.length} lines (last {TAIL} and live)
        </span>
      </form>
      <ErrorNote error={error} />
      {held.dropped > 0 && <Dropped count={held.dropped} runId={run.id} />}
      <div className="log-box" ref={box} onScroll={rows.onScroll} role="log" aria-label="Run logs" data-lines={shown.length}>
        <div className="log-rows" style={{ height: rows.height }}>
          <div style={{ transform: `translateY(${rows.start * LINE_PX}px)` }}>
            {shown.slice(rows.start, rows.end).map((l) => (
              <LogRow key={l.id} line={l} showRank={ranks.length > 1} />
            ))}
          </div>
        </div>
      </div>
    </div>
  );
}
