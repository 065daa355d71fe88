import { Link } from 'react-router';
import { StatusBadge } from '../../components/StatusBadge';
import { formatDate } from '../../lib/format';
import { formatAgo, formatGpuMemory, gpuModels, isBusy, liveFirst, type GangPlace, type Gpu, type Worker } from './summary';

export function WorkersTable({ workers }: { workers: readonly Worker[] }) {
  return (
    <table className="workers">
      <thead>
        <tr>
          <th scope="col">Worker</th>
          <th scope="col">Queues</th>
          <th scope="col" className="num">Capacity</th>
          <th scope="col">GPUs</th>
          <th scope="col">Current run</th>
          <th scope="col">Last heartbeat</th>
        </tr>
      </thead>
      <tbody>
        {liveFirst(workers).map((w) => (
          <tr key={w.name} data-worker={w.name} className={w.stale ? 'stale' : undefined}>
            <th scope="row">
              <div className="worker-name">
                {w.name}
                {w.stale && (
                  <span className="badge badge-stale" title="No heartbeat for longer than the API's lost_after_s; its run is (or will be) marked lost">
                    stale
                  </span>
                )}
              </div>
              <div className="muted small">{w.hostname}</div>
              <div className="muted small" title="Where the other nodes of a gang reach it">
                address <code>{w.address}</code>
              </div>
            </th>
            <td>
              {w.queues.map((q) => (
                <code key={q} className="queue-tag">
                  {q}
                </code>
              ))}
            </td>
            <td className="num">{w.capacity}</td>
            <td>
              <GpuCell gpus={w.gpus} />
            </td>
            <td>
              <CurrentRun worker={w} />
            </td>
            <td title={formatDate(w.last_heartbeat)}>
              {formatAgo(w.seconds_since_heartbeat)}
              <div className="muted small">first seen {formatDate(w.first_seen)}</div>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function CurrentRun({ worker: w }: { worker: Worker }) {
  if (w.gang) return <GangRun gang={w.gang} worker={w} />;
  if (w.current_run_id != null) {
    return (
      <>
        <Link to={`/runs/${w.current_run_id}`}>#{w.current_run_id}</Link>{' '}
        {w.current_run_status && <StatusBadge status={w.current_run_status} />}
        <div className="muted small">{w.last_step == null ? 'no step yet' : `step ${w.last_step}`}</div>
      </>
    );
  }
  if (isBusy(w)) return <span className="muted">a run outside your projects</span>;
  return <span className="muted">idle</span>;
}

/** A node of a multi-node attempt: its place, the run, and the gang's other workers by node rank. */
function GangRun({ gang, worker: w }: { gang: GangPlace; worker: Worker }) {
  return (
    <>
      <span className="gang-place">
        node {gang.node_rank} of {gang.nodes} in run <Link to={`/runs/${gang.run_id}`}>#{gang.run_id}</Link>
      </span>{' '}
      {w.current_run_status && <StatusBadge status={w.current_run_status} />}
      <div className="muted small">
        gang:{' '}
        {gang.workers.map((name, rank) => (
          <span key={rank}>
            {rank > 0 && ', '}
            {name === w.name ? <strong>{name}</strong> : name}
          </span>
        ))}
      </div>
      <div className="muted small">{w.last_step == null ? 'no step yet' : `step ${w.last_step}`}</div>
    </>
  );
}

function GpuCell({ gpus }: { gpus: readonly Gpu[] }) {
  if (gpus.length === 0) return <span className="muted">none (CPU)</span>;
  return (
    <div className="gpus">
      <div>{gpuModels(gpus)}</div>
      <ul>
        {gpus.map((g) => (
          <li key={g.index}>
            <span className="gpu-index">{g.index}</span>
            <Meter label={`GPU ${g.index} utilisation`} percent={g.utilization ?? null} text={g.utilization == null ? '—' : `${Math.round(g.utilization)}%`} />
            <Meter
              label={`GPU ${g.index} memory`}
              percent={g.memory_used_mb == null || g.memory_total_mb <= 0 ? null : (100 * g.memory_used_mb) / g.memory_total_mb}
              text={formatGpuMemory(g.memory_used_mb, g.memory_total_mb)}
            />
          </li>
        ))}
      </ul>
    </div>
  );
}

function Meter({ label, percent, text }: { label: string; percent: number | null; text: string }) {
  const clamped = percent == null ? 0 : Math.min(100, Math.max(0, percent));
  return (
    <span className="meter-wrap">
      <span
        className="meter"
        role="meter"
        aria-label={label}
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={percent == null ? undefined : Math.round(clamped)}
        aria-valuetext={text}
      >
        <span className="meter-fill" style={{ width: `${clamped}%` }} />
      </span>
      <span className="num small">{text}</span>
    </span>
  );
}
