import { Fragment, useEffect, useState } from 'react';
import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import { useMetricKeys } from '../../api/queries';
import { isActive, isTerminal } from '../../api/runStatus';
import { ErrorNote } from '../../components/ErrorNote';
import { runDecoding } from '../../lib/decoding';
import { formatBytes, formatDate } from '../../lib/format';
import { evalAt, evalKeys } from './checkpointEval';
import { CheckpointEvaluations } from './CheckpointEvaluations';
import { DownloadArchive, EvalList, EvaluateCheckpoint, FileList, MetadataList, StartFromCheckpoint } from './CheckpointParts';
import { useRunContext } from './context';

/**
 * Every eval key's history (evaluations are sparse: a few hundred points at most, so not downsampled).
 * `checked` is when the checkpoint list was last read: the evaluation at a new checkpoint's step may
 * come just after it, or after the run ended and the key list stopped polling.
 */
function useEvalHistory(runId: number, live: boolean, checked: number) {
  const keys = useMetricKeys(runId, live);
  const { refetch } = keys;
  useEffect(() => {
    if (checked) void refetch();
  }, [checked, refetch]);
  const wanted = keys.data ? evalKeys(keys.data.data) : null;
  // A new evaluation changes the point counts, and with them the query: its history is fetched again.
  const counts = keys.data?.data.filter((k) => wanted?.includes(k.key)).map((k) => k.count);
  const history = useQuery({
    queryKey: queryKeys.runs.evalHistory(runId, wanted, counts),
    enabled: !!wanted?.length,
    queryFn: () =>
      unwrap(
        api.GET('/api/v1/runs/{run_id}/metrics', {
          params: { path: { run_id: runId }, query: { keys: wanted ?? [], max_points: 20_000 } },
        }),
      ),
  });
  if (!wanted) return { series: undefined, error: keys.error };
  if (!wanted.length) return { series: [], error: null };
  return { series: history.data?.series, error: history.error };
}

const COLUMNS = 8;

export function CheckpointsTab() {
  const { run } = useRunContext();
  const [open, setOpen] = useState<number | null>(null);
  const list = useQuery({
    queryKey: queryKeys.runs.checkpoints(run.id),
    queryFn: () => unwrap(api.GET('/api/v1/runs/{run_id}/checkpoints', { params: { path: { run_id: run.id } } })),
    refetchInterval: 15_000,
  });
  const evals = useEvalHistory(run.id, isActive(run.status), list.dataUpdatedAt);
  if (list.error) return <ErrorNote error={list.error} />;
  if (!list.data) return <p className="muted">Loading checkpoints…</p>;
  if (list.data.count === 0) return <p className="muted">{isTerminal(run.status) ? 'This run saved no checkpoints.' : 'No checkpoints yet.'}</p>;
  return (
    <>
      <ErrorNote error={evals.error} />
      <table className="checkpoints">
        <thead>
          <tr>
            <th scope="col">Step</th>
            <th scope="col">Kind</th>
            <th scope="col">Size</th>
            <th scope="col">Created</th>
            <th scope="col">Eval at this step</th>
            <th scope="col">Metadata</th>
            <th scope="col">Download</th>
            <th scope="col">Use</th>
          </tr>
        </thead>
        <tbody>
          {list.data.data.map((c) => (
            <Fragment key={c.id}>
              <tr data-step={c.step} data-kind={c.kind}>
                <th scope="row">{c.step}</th>
                <td>{c.kind}</td>
                <td>{formatBytes(c.size)}</td>
                <td>{formatDate(c.created_at)}</td>
                <td>
                  <EvalList values={evals.series && evalAt(evals.series, c.step)} step={c.step} decoding={runDecoding(run.config)} />
                </td>
                <td>
                  <MetadataList ckpt={c} />
                </td>
                <td>
                  <DownloadArchive ckpt={c} />{' '}
                  {open === c.id ? (
                    <FileList ckpt={c} />
                  ) : (
                    <button type="button" className="linklike" onClick={() => setOpen(c.id)}>
                      List files
                    </button>
                  )}
                </td>
                <td className="checkpoint-use">
                  <StartFromCheckpoint run={run} step={c.step} />
                  <EvaluateCheckpoint run={run} ckpt={c} />
                </td>
              </tr>
              {!!c.evaluations?.length && (
                <tr className="checkpoint-evals">
                  <td colSpan={COLUMNS}>
                    <CheckpointEvaluations
                      caption={c.kind === 'export' ? "Evaluations of the run's output" : `Evaluations of step ${c.step}`}
                      evaluations={c.evaluations}
                    />
                  </td>
                </tr>
              )}
            </Fragment>
          ))}
        </tbody>
      </table>
    </>
  );
}
