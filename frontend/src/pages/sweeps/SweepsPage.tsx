import { Link, useSearchParams } from 'react-router';
import { useSweeps, type SweepSummary } from '../../api/sweeps';
import { ErrorNote } from '../../components/ErrorNote';
import { ProjectFilter } from '../../components/ProjectFilter';
import { StatusBadge } from '../../components/StatusBadge';
import { formatDate, formatNumber } from '../../lib/format';
import './sweeps.css';

const LIMIT = 100;

function SweepsTable({ sweeps }: { sweeps: SweepSummary[] }) {
  return (
    <table className="sweeps">
      <thead>
        <tr>
          <th scope="col">ID</th>
          <th scope="col">Status</th>
          <th scope="col">Name</th>
          <th scope="col">Project</th>
          <th scope="col">Method</th>
          <th scope="col">Metric</th>
          <th scope="col">Trials</th>
          <th scope="col">Best</th>
          <th scope="col">Updated</th>
        </tr>
      </thead>
      <tbody>
        {sweeps.map((s) => (
          <tr key={s.id} data-sweep-id={s.id}>
            <td>
              <Link to={`/sweeps/${s.id}`}>{s.id}</Link>
            </td>
            <td>
              <StatusBadge status={s.status} />
            </td>
            <th scope="row">
              <Link to={`/sweeps/${s.id}`}>{s.name}</Link>
            </th>
            <td>{s.project}</td>
            <td>{s.method}</td>
            <td data-testid="sweep-metric">
              <code>{s.metric}</code> <span className="muted">({s.goal})</span>
            </td>
            <td className="num" data-testid="sweep-trials">
              {s.trials}/{s.budget}
            </td>
            <td className="num" data-testid="sweep-best">
              {formatNumber(s.best_value)}
            </td>
            <td>{formatDate(s.updated_at)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function SweepsPage() {
  const [params, setParams] = useSearchParams();
  const project = params.get('project') ?? '';
  const sweeps = useSweeps({ project: project || undefined, limit: LIMIT });
  const items = sweeps.data?.items ?? [];
  const pickProject = (next: string) => setParams(next ? { project: next } : {}, { replace: true });

  return (
    <section className="sweeps-page">
      <div className="page-head">
        <h1>Sweeps</h1>
      </div>
      <ProjectFilter project={project} onChange={pickProject} />
      <ErrorNote error={sweeps.error} />
      {sweeps.data && items.length > 0 && <SweepsTable sweeps={items} />}
      {sweeps.data && items.length === 0 && (
        <p className="muted">
          {project ? `No sweeps in ${project}.` : 'No sweeps yet.'} Start one with <code>rlplane sweep sweep.yaml</code> (see examples/sweeps/).
        </p>
      )}
      {items.length === LIMIT && <p className="muted">The newest {LIMIT} sweeps.</p>}
      {sweeps.isPending && <p className="muted">Loading sweeps…</p>}
    </section>
  );
}
