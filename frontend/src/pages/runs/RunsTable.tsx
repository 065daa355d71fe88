import { Link } from 'react-router';
import type { Alert } from '../../api/alerts';
import type { Run, RunSort } from '../../api/types';
import { StatusBadge } from '../../components/StatusBadge';
import { runDecoding } from '../../lib/decoding';
import { formatDate, formatDuration } from '../../lib/format';
import { AlertMarker } from './AlertMarker';
import { CONFIG_COLUMNS, configValue, type ConfigColumn } from './columns';
import { LatestMetric } from './LatestMetric';

interface Props {
  runs: Run[];
  sort: RunSort;
  onSort: (column: string) => void;
  selected: ReadonlySet<number>;
  onToggle: (id: number) => void;
  columns: readonly ConfigColumn[];
  /** Open alerts by run id; a run with none has no entry. */
  openAlerts?: ReadonlyMap<number, Alert[]>;
}

const SORTABLE: Record<string, string> = { id: 'ID', status: 'Status', name: 'Name', created_at: 'Created' };

function SortHeader({ column, sort, onSort }: { column: string; sort: RunSort; onSort: (c: string) => void }) {
  const dir = sort === column ? 'ascending' : sort === `-${column}` ? 'descending' : 'none';
  return (
    <th scope="col" aria-sort={dir}>
      <button type="button" className="linklike" onClick={() => onSort(column)}>
        {SORTABLE[column]} {dir === 'ascending' ? '▲' : dir === 'descending' ? '▼' : ''}
      </button>
    </th>
  );
}

export function RunsTable({ runs, sort, onSort, selected, onToggle, columns, openAlerts }: Props) {
  const config = CONFIG_COLUMNS.filter((c) => columns.includes(c.id));
  return (
    <table className="runs">
      <thead>
        <tr>
          <th scope="col">
            <span className="sr-only">Select</span>
          </th>
          <SortHeader column="id" sort={sort} onSort={onSort} />
          <SortHeader column="status" sort={sort} onSort={onSort} />
          <SortHeader column="name" sort={sort} onSort={onSort} />
          <th scope="col">Project</th>
          <th scope="col">Algorithm</th>
          <th scope="col">Backend</th>
          <th scope="col">Queue</th>
          <SortHeader column="created_at" sort={sort} onSort={onSort} />
          <th scope="col">Duration</th>
          <th scope="col">Step</th>
          <th scope="col">Headline metric</th>
          {config.map((c) => (
            <th scope="col" key={c.id} data-column={c.id}>
              {c.label}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>
        {runs.map((run) => (
          <tr key={run.id} data-run-id={run.id}>
            <td>
              <input
                type="checkbox"
                aria-label={`Select run ${run.id}`}
                checked={selected.has(run.id)}
                onChange={() => onToggle(run.id)}
              />
            </td>
            <td>
              <Link to={`/runs/${run.id}`}>{run.id}</Link>
            </td>
            <td>
              <StatusBadge status={run.status} />
              <AlertMarker runId={run.id} alerts={openAlerts?.get(run.id)} />
            </td>
            <th scope="row">
              <Link to={`/runs/${run.id}`}>{run.name}</Link>
            </th>
            <td>{run.project}</td>
            <td>{run.algorithm}</td>
            <td>{run.backend}</td>
            <td>{run.queue}</td>
            <td>{formatDate(run.created_at)}</td>
            <td>{formatDuration(run.started_at, run.ended_at)}</td>
            <td className="num">
              {run.last_step ?? 0}/{run.total_steps}
            </td>
            <td data-column="headline">
              <LatestMetric headline={run.headline} decoding={runDecoding(run.config)} />
            </td>
            {config.map((c) => (
              <ConfigCell key={c.id} column={c.id} value={configValue(run, c.id)} />
            ))}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function ConfigCell({ column, value }: { column: ConfigColumn; value: string }) {
  if (column !== 'model') {
    return (
      <td data-column={column} className="num">
        {value}
      </td>
    );
  }
  // A model path is one line, cut with an ellipsis; the title shows all of it.
  return (
    <td data-column={column}>
      <span className="config-model" title={value}>
        {value}
      </span>
    </td>
  );
}
