import { Link } from 'react-router';
import type { RunDetail, RunLink } from '../../api/types';
import { StatusBadge } from '../../components/StatusBadge';
import { formatDate } from '../../lib/format';
import { priorityName } from '../../lib/priority';
import { Attempts, SlurmJobs } from './Attempts';
import { RunActions } from './RunActions';
import { isExternal } from './command';

function Links({ label, links }: { label: string; links: RunLink[] }) {
  if (!links.length) return null;
  return (
    <div className="lineage">
      <span className="muted">{label}:</span>{' '}
      {links.map((l, i) => (
        <span key={`${l.run_id}-${l.field}`}>
          {i > 0 && ', '}
          <Link to={`/runs/${l.run_id}`} title={`${l.field}${l.step != null ? ` @ step ${l.step}` : ''}`}>
            #{l.run_id} {l.name}
          </Link>{' '}
          <StatusBadge status={l.status} />
        </span>
      ))}
    </div>
  );
}

export function RunHeader({ run, liveStep, connected }: { run: RunDetail; liveStep: number | null; connected: boolean }) {
  const step = Math.max(run.last_step ?? 0, liveStep ?? 0);

  return (
    <header className="run-header">
      <div className="run-title">
        <h1>
          <span className="muted">#{run.id}</span> {run.name}
        </h1>
        <StatusBadge status={run.status} />
        {isExternal(run) && (
          <span className="badge badge-external" title="Its script started it through the SDK (rlplane.init), outside any worker: it ends when the script says so, and cannot be resumed">
            started by its script
          </span>
        )}
        <span className="num" data-testid="run-step">
          step {step}/{run.total_steps}
        </span>
        <span className={`live-dot${connected ? ' on' : ''}`} title={connected ? 'live' : 'not connected'} aria-label={connected ? 'live updates on' : 'live updates off'} />
        <RunActions run={run} />
      </div>
      {run.status_reason && <p className="muted">{run.status_reason}</p>}
      {run.preempted_by != null && (
        <p className="muted" data-testid="preempted-by">
          Being handed back for <Link to={`/runs/${run.preempted_by}`}>#{run.preempted_by}</Link>, a waiting run of a
          higher priority: it resumes from this checkpoint once there is room.
        </p>
      )}
      <p className="muted">
        {run.project} · {run.algorithm} · {run.backend} · queue {run.queue} · priority {priorityName(run.priority)} · created{' '}
        {formatDate(run.created_at)}
        {run.created_by ? ` by ${run.created_by}` : ''}
      </p>
      <Links label="Parents" links={run.parents} />
      <Links label="Children" links={run.children} />
      <Attempts attempts={run.attempts} />
      <SlurmJobs jobs={run.slurm_jobs ?? []} />
    </header>
  );
}
