import { useState } from 'react';
import { Link, useParams } from 'react-router';
import { ApiError } from '../../api/client';
import { useCancelSweep, useSweep, type SweepDetail } from '../../api/sweeps';
import { ConfirmDialog } from '../../components/ConfirmDialog';
import { ErrorNote } from '../../components/ErrorNote';
import { StatusBadge } from '../../components/StatusBadge';
import { formatDate } from '../../lib/format';
import { BestTrial } from './BestTrial';
import { ParallelCoordinates } from './ParallelCoordinates';
import { TrialsTable } from './TrialsTable';
import './sweeps.css';

/** "median from step 100": how weak trials are stopped, from the document's early_stopping. */
function earlyStopping(early: SweepDetail['early_stopping']): string | null {
  if (!early) return null;
  const method = typeof early.method === 'string' ? early.method.replace('_', ' ') : 'early stopping';
  return typeof early.min_steps === 'number' && early.min_steps > 0 ? `${method} from step ${early.min_steps}` : method;
}

function SweepFacts({ sweep }: { sweep: SweepDetail }) {
  const stopping = earlyStopping(sweep.early_stopping);
  return (
    <p className="muted sweep-facts">
      {sweep.project} · {sweep.method} · <code>{sweep.metric}</code> ({sweep.goal}) ·{' '}
      <span data-testid="sweep-trials">
        {sweep.trials}/{sweep.budget} trials
      </span>{' '}
      · {sweep.parallel} at once{stopping ? ` · stops weak trials: ${stopping}` : ''} · created {formatDate(sweep.created_at)} · updated{' '}
      {formatDate(sweep.updated_at)}
    </p>
  );
}

function SweepView({ sweep }: { sweep: SweepDetail }) {
  const cancel = useCancelSweep(sweep.id);
  const [confirming, setConfirming] = useState(false);
  const running = sweep.trial_list.filter((t) => t.state === 'running').length;
  const cancelError = cancel.error instanceof ApiError ? cancel.error.detail : cancel.error instanceof Error ? cancel.error.message : null;

  return (
    <section className="sweep-page">
      <p className="muted">
        <Link to="/sweeps">Sweeps</Link>
      </p>
      <header className="run-title">
        <h1>
          <span className="muted">#{sweep.id}</span> {sweep.name}
        </h1>
        <StatusBadge status={sweep.status} />
        <div className="actions">
          {sweep.status === 'running' && (
            <button type="button" className="danger" disabled={cancel.isPending} onClick={() => setConfirming(true)}>
              Cancel sweep
            </button>
          )}
        </div>
      </header>
      {sweep.reason && <p className="muted">{sweep.reason}</p>}
      <SweepFacts sweep={sweep} />
      {!confirming && cancelError && (
        <p role="alert" className="error">
          Could not cancel the sweep: {cancelError}
        </p>
      )}
      <BestTrial sweep={sweep} />
      <h2>Trials</h2>
      <ParallelCoordinates sweep={sweep} />
      <TrialsTable sweep={sweep} />
      {confirming && (
        <ConfirmDialog
          title={`Cancel sweep #${sweep.id}?`}
          confirmLabel="Cancel sweep"
          dismissLabel="Keep it"
          busy={cancel.isPending}
          error={cancel.error}
          onConfirm={() => cancel.mutate(undefined, { onSuccess: () => setConfirming(false) })}
          onCancel={() => {
            cancel.reset();
            setConfirming(false);
          }}
        >
          <p>
            No more trials start{running ? `; ${running === 1 ? 'the running trial stops' : `${running} running trials stop`} at the current step` : ''}.
            Finished trials keep their runs and values.
          </p>
        </ConfirmDialog>
      )}
    </section>
  );
}

export function SweepPage() {
  const idParam = useParams().id;
  const id = Number(idParam);
  const sweep = useSweep(id);
  if (!Number.isInteger(id) || id < 1) return <p role="alert">“{idParam}” is not a sweep id.</p>;
  if (!sweep.data) return sweep.error ? <ErrorNote error={sweep.error} /> : <p className="muted">Loading sweep {id}…</p>;
  // A failed poll keeps the last answer on screen, with the error above it.
  return (
    <>
      <ErrorNote error={sweep.error} />
      <SweepView sweep={sweep.data} />
    </>
  );
}
