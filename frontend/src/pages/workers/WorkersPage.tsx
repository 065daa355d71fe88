import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import { ErrorNote } from '../../components/ErrorNote';
import { summarizeQueues } from './summary';
import { WorkersTable } from './WorkersTable';
import './workers.css';

export function WorkersPage() {
  const { data, error, isPending } = useQuery({
    queryKey: queryKeys.workers.list(),
    queryFn: () => unwrap(api.GET('/api/v1/workers')),
    refetchInterval: 5_000,
  });
  const workers = data?.data ?? [];
  const summary = summarizeQueues(workers);
  const stale = workers.filter((w) => w.stale).length;
  return (
    <div className="workers-page">
      <h1>Workers</h1>
      <ErrorNote error={error} />
      {isPending && !error && <p className="muted">Loading…</p>}
      {data && workers.length === 0 && (
        <div className="workers-empty">
          <p>No workers have sent a heartbeat.</p>
          <p>
            Start one with <code>rlplane worker --queues cpu --api URL --token TOKEN</code>, or <code>rlplane up</code> starts one
            beside the API.
          </p>
        </div>
      )}
      {workers.length > 0 && (
        <>
          <p className="muted">
            {workers.length} worker{workers.length === 1 ? '' : 's'}
            {stale > 0 && `, ${stale} stale (no recent heartbeat)`} · refreshes every 5 s
          </p>
          <h2>Queues</h2>
          <table className="queue-summary">
            <thead>
              <tr>
                <th scope="col">Queue</th>
                <th scope="col" className="num">Workers</th>
                <th scope="col" className="num">Busy</th>
                <th scope="col" className="num">Idle</th>
                <th scope="col" className="num">Stale</th>
                <th scope="col" className="num">GPUs</th>
              </tr>
            </thead>
            <tbody>
              {summary.map((q) => (
                <tr key={q.queue} data-queue={q.queue}>
                  <th scope="row"><code>{q.queue}</code></th>
                  <td className="num">{q.workers}</td>
                  <td className="num">{q.busy}</td>
                  <td className="num">{q.idle}</td>
                  <td className={`num${q.stale ? ' stale-count' : ''}`}>{q.stale}</td>
                  <td className="num">{q.gpus}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <h2>Workers</h2>
          <WorkersTable workers={workers} />
        </>
      )}
    </div>
  );
}
