import { useState } from 'react';
import { Link } from 'react-router';
import { useMutation, useQueryClient } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import { CANCELLABLE } from '../../api/runStatus';
import type { RunDetail } from '../../api/types';
import { ConfirmDialog } from '../../components/ConfirmDialog';
import { ErrorNote } from '../../components/ErrorNote';
import { isExternal } from './command';

/**
 * Cancel (after a confirmation: it stops a training process), Clone, and Resume where the API would take
 * it: `run.resumable` is false for a run that failed on its own configuration or diverged, which would only
 * fail again. A run its script started itself (outside any worker) is never offered it: no worker could run
 * that script again, and the API refuses.
 */
export function RunActions({ run }: { run: RunDetail }) {
  const queryClient = useQueryClient();
  const external = isExternal(run);
  const [confirming, setConfirming] = useState(false);
  const action = useMutation({
    mutationFn: (name: 'cancel' | 'resume') =>
      unwrap(api.POST(`/api/v1/runs/{run_id}/${name}`, { params: { path: { run_id: run.id } } })),
    onSuccess: (detail) => {
      queryClient.setQueryData(queryKeys.runs.detail(run.id), detail);
      void queryClient.invalidateQueries({ queryKey: queryKeys.runs.lists() });
      setConfirming(false);
    },
  });

  return (
    <>
      <div className="actions">
        {CANCELLABLE.has(run.status) && (
          <button type="button" className="danger" disabled={action.isPending} onClick={() => setConfirming(true)}>
            Cancel
          </button>
        )}
        <Link className="button" to={`/new?clone=${run.id}`}>
          Clone
        </Link>
        {run.resumable && !external && (
          <button type="button" disabled={action.isPending} onClick={() => action.mutate('resume')}>
            Resume
          </button>
        )}
        {external && (run.resumable || run.status === 'failed') && (
          <span className="muted" data-testid="not-resumable">
            Not resumable: its script started it outside a worker; start the script again
          </span>
        )}
        {!external && run.status === 'failed' && !run.resumable && (
          <span className="muted" data-testid="not-resumable">
            Not resumable: it failed {run.failure === 'diverged' ? 'by diverging' : 'on its configuration'}; clone it and change the spec
          </span>
        )}
      </div>
      {confirming && (
        <ConfirmDialog
          title={`Cancel run #${run.id}?`}
          confirmLabel="Cancel run"
          dismissLabel="Keep it"
          busy={action.isPending}
          error={action.error}
          onConfirm={() => action.mutate('cancel')}
          onCancel={() => {
            action.reset();
            setConfirming(false);
          }}
        >
          {external ? (
            <p>
              {run.name}'s script is asked to stop (rlplane's should_stop() turns true) and ends the run itself. It cannot be resumed:
              start the script again.
            </p>
          ) : (
            <p>
              {run.name} stops at its current step{run.status === 'queued' ? '' : ' (its worker ends the training process)'}. You can resume it
              later from its latest checkpoint.
            </p>
          )}
        </ConfirmDialog>
      )}
      {!confirming && <ErrorNote error={action.error} />}
    </>
  );
}
