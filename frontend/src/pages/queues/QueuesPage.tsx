import { Link } from 'react-router';
import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import type { components } from '../../api/schema';
import { ErrorNote } from '../../components/ErrorNote';
import { priorityName } from '../../lib/priority';
import './queues.css';

type Queue = components['schemas']['QueuePublic'];
type Holding = components['schemas']['Holding'];
type Waiting = components['schemas']['Waiting'];

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

/** "8 slots, 4 runs", either half alone, or "—" without a quota. */
function formatQuota(h: Pick<Holding, 'max_gpus' | 'max_runs'>): string {
  const parts = [h.max_gpus != null && plural(h.max_gpus, 'slot'), h.max_runs != null && plural(h.max_runs, 'run')].filter(Boolean);
  return parts.length ? parts.join(', ') : '—';
}

export function QueuesPage() {
  const { data, error, isPending } = useQuery({
    queryKey: queryKeys.queues.list(),
    queryFn: () => unwrap(api.GET('/api/v1/queues')),
    refetchInterval: 5_000,
  });
  const queues = data?.data ?? [];
  return (
    <div className="queues-page">
      <h1>Queues</h1>
      <ErrorNote error={error} />
      {isPending && !error && <p className="muted">Loading…</p>}
      {data && queues.length === 0 && (
        <div className="queues-empty">
          <p>No queue has a live worker or a queued or active run.</p>
          <p>
            A queue shows here once a worker serves it (<code>rlplane worker --queues cpu</code>) or a run is submitted to it.
          </p>
        </div>
      )}
      {queues.length > 0 && (
        <>
          <p className="muted">
            What each project holds of each queue beside its quota, and the runs waiting in the order they start · refreshes every 5 s
          </p>
          {queues.map((q) => (
            <QueueSection key={q.name} queue={q} />
          ))}
        </>
      )}
    </div>
  );
}

function QueueSection({ queue: q }: { queue: Queue }) {
  const titleId = `queue-${q.name}-title`;
  return (
    <section className="queue" data-queue={q.name} aria-labelledby={titleId}>
      <h2 id={titleId} className="queue-head">
        <code>{q.name}</code>{' '}
        <span className="queue-stats">
          {plural(q.workers, 'worker')} ({q.idle} idle), {plural(q.gpus, 'GPU')}
        </span>
      </h2>
      {q.holding.length === 0 ? (
        <p className="muted">No project holds any of it.</p>
      ) : (
        <HoldingTable holding={q.holding} />
      )}
      {q.waiting.length === 0 ? <p className="muted">No run waits for it.</p> : <WaitingTable waiting={q.waiting} />}
    </section>
  );
}

function HoldingTable({ holding }: { holding: readonly Holding[] }) {
  return (
    <table className="queue-holding">
      <caption>Holding</caption>
      <thead>
        <tr>
          <th scope="col">Project</th>
          <th scope="col" className="num" title="GPUs on a GPU queue, worker slots on a CPU queue">
            Holds
          </th>
          <th scope="col" className="num">Runs</th>
          <th scope="col">Quota</th>
        </tr>
      </thead>
      <tbody>
        {holding.map((h) => (
          <tr key={h.project} data-project={h.project}>
            <th scope="row">{h.project}</th>
            <td className="num">{h.slots}</td>
            <td className="num">{h.runs}</td>
            <td>{formatQuota(h)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function WaitingTable({ waiting }: { waiting: readonly Waiting[] }) {
  return (
    <table className="queue-waiting">
      <caption>Waiting</caption>
      <thead>
        <tr>
          <th scope="col">Run</th>
          <th scope="col">Project</th>
          <th scope="col" className="num">Priority</th>
          <th scope="col">Why</th>
        </tr>
      </thead>
      <tbody>
        {waiting.map((w, i) => (
          // Hidden runs have no id, and one project may have several: their place in line is the key.
          <tr key={w.run_id ?? `hidden-${i}`} data-run={w.run_id ?? undefined}>
            <th scope="row">
              {w.run_id == null ? (
                <span className="muted" title="A run in a project you cannot read">
                  (not yours)
                </span>
              ) : (
                <Link to={`/runs/${w.run_id}`}>
                  #{w.run_id} {w.name}
                </Link>
              )}
            </th>
            <td>{w.project}</td>
            <td className="num">{priorityName(w.priority)}</td>
            <td>{w.reason || <span className="muted">—</span>}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
