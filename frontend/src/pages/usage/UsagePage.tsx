import { useMemo, useState } from 'react';
import { Link, useSearchParams } from 'react-router';
import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { downloadFile } from '../../api/download';
import { queryKeys } from '../../api/queryKeys';
import { ErrorNote } from '../../components/ErrorNote';
import { UsageChart } from './UsageChart';
import {
  chartSeries, GROUPS, hours, isGroup, isPeriod, PERIODS, usageQuery, type Period, type UsageBy, type UsageReport, type UsageRow,
} from './usage';
import './usage.css';

/** /usage?period=24h|7d|30d&by=project|user|queue|run: a shareable URL for each view. */
export function UsagePage() {
  const [params, setParams] = useSearchParams();
  const rawPeriod = params.get('period');
  const rawBy = params.get('by');
  const period: Period = isPeriod(rawPeriod) ? rawPeriod : '7d';
  const by: UsageBy = isGroup(rawBy) ? rawBy : 'project';
  const pick = (name: 'period' | 'by', value: string) => {
    const next = new URLSearchParams(params);
    next.set(name, value);
    setParams(next, { replace: true });
  };

  const { data, error, isPending, isPlaceholderData } = useQuery({
    queryKey: queryKeys.usage.report({ by, period }),
    // The endpoint also answers text/csv, which leaves the generated type of its data as `{}`; this asks for JSON.
    queryFn: () => unwrap(api.GET('/api/v1/usage', { params: { query: usageQuery(by, period) } })) as Promise<UsageReport>,
    // The last table stays while another period or grouping loads, rather than the page jumping to "Loading…".
    placeholderData: keepPreviousData,
  });
  const rows = data?.data ?? [];
  const chart = useMemo(() => chartSeries(data?.data ?? []), [data]);
  const totalGpu = rows.reduce((s, r) => s + r.gpu_seconds, 0);
  const totalCpu = rows.reduce((s, r) => s + r.cpu_slot_seconds, 0);

  return (
    <div className="usage-page">
      <h1>Usage</h1>
      <form className="filters" onSubmit={(e) => e.preventDefault()}>
        <div className="field">
          <label htmlFor="usage-period">Period</label>
          <select id="usage-period" value={period} onChange={(e) => pick('period', e.target.value)}>
            {Object.entries(PERIODS).map(([id, p]) => (
              <option key={id} value={id}>
                {p.label}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="usage-by">Group by</label>
          <select id="usage-by" value={by} onChange={(e) => pick('by', e.target.value)}>
            {Object.entries(GROUPS).map(([id, label]) => (
              <option key={id} value={id}>
                {label.toLowerCase()}
              </option>
            ))}
          </select>
        </div>
        {rows.length > 0 && <CsvDownload by={by} period={period} />}
      </form>
      <ErrorNote error={error} />
      {isPending && !error && <p className="muted">Loading…</p>}
      {data && rows.length === 0 && (
        <div className="usage-empty">
          <p>No GPU or CPU use in the {PERIODS[period].label.toLowerCase()} among the runs you can read.</p>
          <p>A run counts from the moment one of its attempts starts on a worker.</p>
        </div>
      )}
      {data && rows.length > 0 && (
        <div className={isPlaceholderData ? 'usage-stale' : undefined} aria-busy={isPlaceholderData || undefined}>
          <p className="muted">
            {hours(totalGpu)} GPU hours and {hours(totalCpu)} CPU slot hours in all, {PERIODS[period].label.toLowerCase()}
          </p>
          {chart.series.length > 0 ? (
            <UsageChart x={chart.x} series={chart.series} interval={data.interval ?? PERIODS[period].interval} />
          ) : (
            <p className="muted">No GPU use in this period: CPU runs count in CPU slot hours only.</p>
          )}
          <UsageTable by={data.by} rows={rows} />
        </div>
      )}
    </div>
  );
}

function UsageTable({ by, rows }: { by: UsageBy; rows: readonly UsageRow[] }) {
  return (
    <table className="usage-table">
      <thead>
        <tr>
          <th scope="col">{GROUPS[by]}</th>
          <th scope="col" className="num">GPU hours</th>
          <th scope="col" className="num" title="Worker slots (one per node) × wall time, for runs on CPU">
            CPU slot hours
          </th>
          <th scope="col" className="num" title="Input tokens trained on, as each attempt's worker said at its end (the supervised recipes count them)">
            Tokens
          </th>
          <th scope="col" className="num" title="Tokens per GPU-second, over the attempts on GPUs that said their tokens">
            Tokens / GPU·s
          </th>
          <th scope="col" className="num">Runs</th>
          <th scope="col" className="num">Attempts</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr key={r.key} data-key={r.key}>
            <th scope="row">
              <KeyCell by={by} value={r.key} />
            </th>
            <td className="num" data-col="gpu_hours">{hours(r.gpu_seconds)}</td>
            <td className="num" data-col="cpu_slot_hours">{hours(r.cpu_slot_seconds)}</td>
            <td className="num" data-col="tokens">{(r.tokens ?? 0).toLocaleString('en-US')}</td>
            <td className="num" data-col="tokens_per_gpu_second">
              {r.tokens_per_gpu_second == null ? '—' : Math.round(r.tokens_per_gpu_second).toLocaleString('en-US')}
            </td>
            <td className="num" data-col="runs">{r.runs}</td>
            <td className="num" data-col="attempts">{r.attempts}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** A run's key is "<id> <name>": a link to the run. */
function KeyCell({ by, value }: { by: UsageBy; value: string }) {
  const run = by === 'run' ? /^(\d+) (.*)$/.exec(value) : null;
  if (!run) return <>{value}</>;
  return (
    <Link to={`/runs/${run[1]}`}>
      #{run[1]} {run[2]}
    </Link>
  );
}

/** The same report as CSV, fetched with the token (a plain link could not send it). */
function CsvDownload({ by, period }: { by: UsageBy; period: Period }) {
  const [state, setState] = useState<{ busy: boolean; error: unknown }>({ busy: false, error: null });
  const download = () => {
    const query = new URLSearchParams({ ...usageQuery(by, period), format: 'csv' });
    setState({ busy: true, error: null });
    downloadFile(`/api/v1/usage?${query}`, `usage-${by}-${period}.csv`)
      .then(() => setState({ busy: false, error: null }))
      .catch((error: unknown) => setState({ busy: false, error }));
  };
  return (
    <div className="usage-download">
      <button type="button" className="linklike" onClick={download} disabled={state.busy}>
        {state.busy ? 'Downloading…' : 'Download CSV'}
      </button>
      <ErrorNote error={state.error} />
    </div>
  );
}
