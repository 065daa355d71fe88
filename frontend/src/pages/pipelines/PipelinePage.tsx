import { useState } from 'react';
import { Link, useParams } from 'react-router';
import { ApiError } from '../../api/client';
import { usePipeline, usePipelineAction, type PipelineAction, type PipelineDetail } from '../../api/pipelines';
import { ConfirmDialog } from '../../components/ConfirmDialog';
import { ErrorNote } from '../../components/ErrorNote';
import { StatusBadge } from '../../components/StatusBadge';
import { formatDate } from '../../lib/format';
import { PipelineGraph } from './PipelineGraph';
import { StageDetails } from './StageDetails';
import './pipelines.css';

/** The API's own words for a refused action (409: not retryable now; 422: the stage or its spec), naming what was tried. */
function ActionError({ action, error }: { action: PipelineAction | undefined; error: unknown }) {
  if (!error || !action) return null;
  const what = action.kind === 'cancel' ? 'cancel the pipeline' : `retry ${action.stage}`;
  const detail = error instanceof ApiError ? error.detail : error instanceof Error ? error.message : String(error);
  return (
    <p role="alert" className="error">
      Could not {what}: {detail}
    </p>
  );
}

function PipelineView({ pipeline }: { pipeline: PipelineDetail }) {
  const action = usePipelineAction(pipeline.id);
  const [confirming, setConfirming] = useState(false);
  const cancel = () => action.mutate({ kind: 'cancel' }, { onSuccess: () => setConfirming(false) });
  const running = pipeline.stages.filter((s) => s.status === 'running').length;

  return (
    <section className="pipeline-page">
      <p className="muted">
        <Link to="/pipelines">Pipelines</Link>
      </p>
      <header className="run-title">
        <h1>
          <span className="muted">#{pipeline.id}</span> {pipeline.name}
        </h1>
        <StatusBadge status={pipeline.status} />
        <div className="actions">
          {pipeline.status === 'running' && (
            <button type="button" className="danger" disabled={action.isPending} onClick={() => setConfirming(true)}>
              Cancel pipeline
            </button>
          )}
        </div>
      </header>
      {pipeline.reason && <p className="muted">{pipeline.reason}</p>}
      <p className="muted">
        {pipeline.project} · {pipeline.stages.length} stages · created {formatDate(pipeline.created_at)} · updated {formatDate(pipeline.updated_at)}
      </p>
      {!confirming && <ActionError action={action.variables} error={action.error} />}
      <PipelineGraph stages={pipeline.stages} busy={action.isPending} onRetry={(stage) => action.mutate({ kind: 'retry', stage })} />
      <StageDetails stages={pipeline.stages} />
      {confirming && (
        <ConfirmDialog
          title={`Cancel pipeline #${pipeline.id}?`}
          confirmLabel="Cancel pipeline"
          dismissLabel="Keep it"
          busy={action.isPending}
          error={action.error}
          onConfirm={cancel}
          onCancel={() => {
            action.reset();
            setConfirming(false);
          }}
        >
          <p>
            Every stage that has not finished is cancelled{running ? `; ${running === 1 ? 'the running stage stops' : `${running} running stages stop`} at the current step` : ''}.
            A cancelled stage can be retried later.
          </p>
        </ConfirmDialog>
      )}
    </section>
  );
}

export function PipelinePage() {
  const idParam = useParams().id;
  const id = Number(idParam);
  const pipeline = usePipeline(id);
  if (!Number.isInteger(id) || id < 1) return <p role="alert">“{idParam}” is not a pipeline id.</p>;
  if (!pipeline.data) return pipeline.error ? <ErrorNote error={pipeline.error} /> : <p className="muted">Loading pipeline {id}…</p>;
  // A failed poll keeps the last answer on screen, with the error above it.
  return (
    <>
      <ErrorNote error={pipeline.error} />
      <PipelineView pipeline={pipeline.data} />
    </>
  );
}
