import { Link } from 'react-router';
import type { Attempt, AttemptNode, SlurmJob } from '../../api/types';
import { formatDate } from '../../lib/format';

const COLUMNS = 6;

/** A run's attempts; a multi-node attempt (a gang) lists its nodes in a row beneath it. */
export function Attempts({ attempts }: { attempts: readonly Attempt[] }) {
  if (attempts.length === 0) return null;
  return (
    <details className="attempts">
      <summary>
        {attempts.length} attempt{attempts.length > 1 ? 's' : ''}
      </summary>
      <table>
        <thead>
          <tr>
            <th scope="col">#</th>
            <th scope="col">Worker</th>
            <th scope="col">Started</th>
            <th scope="col">Ended</th>
            <th scope="col">End reason</th>
            <th scope="col">Last step</th>
          </tr>
        </thead>
        <tbody>
          {attempts.map((a) => (
            <AttemptRows key={a.number} attempt={a} />
          ))}
        </tbody>
      </table>
    </details>
  );
}

function AttemptRows({ attempt: a }: { attempt: Attempt }) {
  const nodes = a.nodes ?? [];
  return (
    <>
      <tr>
        <th scope="row">{a.number}</th>
        <td>{a.worker}</td>
        <td>{formatDate(a.started_at)}</td>
        <td>{formatDate(a.ended_at)}</td>
        <td>
          {a.end_reason ?? '—'}
          {a.preempted_by != null && (
            <>
              {' '}
              (<Link to={`/runs/${a.preempted_by}`}>#{a.preempted_by}</Link> went first)
            </>
          )}
        </td>
        <td>{a.last_step ?? '—'}</td>
      </tr>
      {nodes.length > 0 && (
        <tr className="attempt-nodes">
          <td colSpan={COLUMNS}>
            <NodesTable attempt={a.number} nodes={nodes} />
          </td>
        </tr>
      )}
    </>
  );
}

export function NodesTable({ attempt, nodes }: { attempt: number; nodes: readonly AttemptNode[] }) {
  return (
    <table className="nodes">
      <caption>
        Attempt {attempt}: {nodes.length} nodes
      </caption>
      <thead>
        <tr>
          <th scope="col">Node rank</th>
          <th scope="col">Role</th>
          <th scope="col">Worker</th>
          <th scope="col">Address</th>
          <th scope="col">State</th>
          <th scope="col">End reason</th>
        </tr>
      </thead>
      <tbody>
        {nodes.map((n) => (
          <tr key={n.node_rank} data-node-rank={n.node_rank}>
            <th scope="row">{n.node_rank}</th>
            <td title={n.role === 'generator' ? "Samples the trainer's groups (grpo.generator: node)" : undefined}>
              {n.role}
            </td>
            <td>{n.worker}</td>
            <td title={addressMeaning(n)}>
              {n.address ? <code>{hostPort(n.address, n.port)}</code> : '—'}
            </td>
            <td title={n.ended_at ? `ended ${formatDate(n.ended_at)}` : undefined}>{n.state}</td>
            <td>{n.end_reason ?? '—'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function addressMeaning(n: AttemptNode): string | undefined {
  if (n.role === 'generator') return 'Where its generator listens: the trainer on node 0 connects to it';
  return n.node_rank === 0 ? 'The rendezvous address the other nodes join' : undefined;
}

/** `host:port`, with an IPv6 host bracketed so the port stays readable. */
export function hostPort(address: string, port: number | null): string {
  if (port == null) return address;
  const host = address.includes(':') && !address.startsWith('[') ? `[${address}]` : address;
  return `${host}:${port}`;
}

/** A run on a queue bound to Slurm: its jobs, one per attempt they served (docs/slurm.md). */
export function SlurmJobs({ jobs }: { jobs: readonly SlurmJob[] }) {
  if (jobs.length === 0) return null;
  return (
    <table className="nodes slurm-jobs">
      <caption>
        {jobs.length} Slurm job{jobs.length > 1 ? 's' : ''}
      </caption>
      <thead>
        <tr>
          <th scope="col">Job</th>
          <th scope="col">State</th>
          <th scope="col">Reason</th>
          <th scope="col">Nodes</th>
          <th scope="col">Submitted</th>
          <th scope="col">Output</th>
        </tr>
      </thead>
      <tbody>
        {jobs.map((j) => (
          <tr key={j.job_id} data-slurm-job={j.job_id}>
            <th scope="row">{j.job_id}</th>
            <td title={j.ended_at ? `ended ${formatDate(j.ended_at)}` : undefined}>
              {j.state}
              {j.restarts > 0 ? ` (requeued ${j.restarts}×)` : ''}
            </td>
            <td>{j.reason ?? '—'}</td>
            <td>{j.node_list ?? '—'}</td>
            <td>{formatDate(j.submitted_at)}</td>
            <td title="The batch script's output, in the queue's job directory">
              <code>{j.output}</code>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
