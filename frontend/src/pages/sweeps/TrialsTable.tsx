import { useState } from 'react';
import { Link } from 'react-router';
import type { SweepDetail, Trial } from '../../api/sweeps';
import { StatusBadge } from '../../components/StatusBadge';
import { MetricValue } from '../../components/Decoding';
import { formatParam, nextSort, searchedPaths, sortTrials, type SortColumn, type TrialSort } from './values';

function SortHeader({ column, sort, onSort, children }: { column: SortColumn; sort: TrialSort; onSort: (c: SortColumn) => void; children: string }) {
  const direction = sort.column === column ? sort.direction : 'none';
  return (
    <th scope="col" aria-sort={direction} className={column === 'value' ? 'num' : undefined}>
      <button type="button" className="linklike" onClick={() => onSort(column)}>
        {children} {direction === 'ascending' ? '▲' : direction === 'descending' ? '▼' : ''}
      </button>
    </th>
  );
}

export function TrialRun({ trial }: { trial: Trial }) {
  if (trial.run_id == null) return <span className="muted">no run</span>;
  return (
    <Link to={`/runs/${trial.run_id}`} title={trial.run_status ? `run status: ${trial.run_status}` : undefined}>
      run #{trial.run_id}
    </Link>
  );
}

type Props = { sweep: Pick<SweepDetail, 'space' | 'trial_list' | 'metric' | 'goal' | 'best'> };

/** Every trial with the values it searched, its metric value and its run; sortable by number or by the value. */
export function TrialsTable({ sweep }: Props) {
  const [sort, setSort] = useState<TrialSort>({ column: 'number', direction: 'ascending' });
  const paths = searchedPaths(sweep);
  const trials = sortTrials(sweep.trial_list, sort);
  const onSort = (column: SortColumn) => setSort(nextSort(sort, column, sweep.goal));
  if (trials.length === 0) return <p className="muted">No trials yet.</p>;
  return (
    <div className="trials-scroll">
      <table className="trials">
        <thead>
          <tr>
            <SortHeader column="number" sort={sort} onSort={onSort}>
              Trial
            </SortHeader>
            <th scope="col">State</th>
            {paths.map((path) => (
              <th scope="col" key={path} data-path={path}>
                <code>{path}</code>
              </th>
            ))}
            <SortHeader column="value" sort={sort} onSort={onSort}>{`${sweep.metric} (${sweep.goal})`}</SortHeader>
            <th scope="col">Run</th>
            <th scope="col">Reason</th>
          </tr>
        </thead>
        <tbody>
          {trials.map((trial) => {
            const best = trial.number === sweep.best?.number;
            return (
              <tr key={trial.number} data-trial={trial.number} data-best={best || undefined} className={best ? 'best' : undefined}>
                <th scope="row">
                  {trial.number}
                  {best && <span className="best-mark" title="best trial"> ★<span className="sr-only">best</span></span>}
                </th>
                <td>
                  <StatusBadge status={trial.state} />
                </td>
                {paths.map((path) => (
                  <td key={path} className="num" data-path={path} title={JSON.stringify(trial.params[path])}>
                    {formatParam(trial.params[path])}
                  </td>
                ))}
                <td className="num" data-testid="trial-value">
                  <MetricValue metricKey={sweep.metric} value={trial.value} decoding={trial.decoding} />
                </td>
                <td>
                  <TrialRun trial={trial} />
                </td>
                <td className="trial-reason">{trial.reason ?? ''}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
