import { Link, useSearchParams } from 'react-router';
import { usePipelines, type PipelineSummary } from '../../api/pipelines';
import { ErrorNote } from '../../components/ErrorNote';
import { ProjectFilter } from '../../components/ProjectFilter';
import { StatusBadge } from '../../components/StatusBadge';
import { formatDate } from '../../lib/format';
import { StageStrip } from './StageStrip';
import './pipelines.css';

const LIMIT = 100;

function PipelinesTable({ pipelines }: { pipelines: PipelineSummary[] }) {
  return (
    <table className="pipelines">
      <thead>
        <tr>
          <th scope="col">ID</th>
          <th scope="col">Status</th>
          <th scope="col">Name</th>
          <th scope="col">Project</th>
          <th scope="col">Stages</th>
          <th scope="col">Updated</th>
        </tr>
      </thead>
      <tbody>
        {pipelines.map((p) => (
          <tr key={p.id} data-pipeline-id={p.id}>
            <td>
              <Link to={`/pipelines/${p.id}`}>{p.id}</Link>
            </td>
            <td>
              <StatusBadge status={p.status} />
            </td>
            <th scope="row">
              <Link to={`/pipelines/${p.id}`}>{p.name}</Link>
            </th>
            <td>{p.project}</td>
            <td>
              <StageStrip stages={p.stages} />
            </td>
            <td>{formatDate(p.updated_at)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function PipelinesPage() {
  const [params, setParams] = useSearchParams();
  const project = params.get('project') ?? '';
  const pipelines = usePipelines({ project: project || undefined, limit: LIMIT });
  const items = pipelines.data?.items ?? [];
  const pickProject = (next: string) => setParams(next ? { project: next } : {}, { replace: true });

  return (
    <section className="pipelines-page">
      <div className="page-head">
        <h1>Pipelines</h1>
      </div>
      <ProjectFilter project={project} onChange={pickProject} />
      <ErrorNote error={pipelines.error} />
      {pipelines.data && items.length > 0 && <PipelinesTable pipelines={items} />}
      {pipelines.data && items.length === 0 && (
        <p className="muted">
          {project ? `No pipelines in ${project}.` : 'No pipelines yet.'} Submit one with <code>rlplane submit pipeline.yaml</code> (see
          examples/pipelines/).
        </p>
      )}
      {items.length === LIMIT && <p className="muted">The newest {LIMIT} pipelines.</p>}
      {pipelines.isPending && <p className="muted">Loading pipelines…</p>}
    </section>
  );
}
