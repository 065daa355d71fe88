import { useState } from 'react';
import { Link } from 'react-router';
import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import { saveFromUrl } from '../../api/download';
import type { Checkpoint, RunDetail } from '../../api/types';
import { MetricValue } from '../../components/Decoding';
import { ErrorNote } from '../../components/ErrorNote';
import { formatBytes } from '../../lib/format';
import { metadataLines, type EvalValue } from './checkpointEval';

/**
 * Download the checkpoint's tar, or one file of it, through a short-lived signed link: the browser streams it to disk
 * itself (a fetch with the token would hold all of it, gigabytes, in the page).
 */
async function downloadCheckpoint(ckpt: Checkpoint, filename: string, file?: string): Promise<void> {
  const link = await unwrap(
    api.POST('/api/v1/runs/{run_id}/checkpoints/{step}/download-url', {
      params: { path: { run_id: ckpt.run_id, step: ckpt.step }, query: { kind: ckpt.kind } },
      body: file === undefined ? {} : { file },
    }),
  );
  saveFromUrl(link.url, filename);
}

export function FileList({ ckpt }: { ckpt: Checkpoint }) {
  const [error, setError] = useState<unknown>(null);
  const files = useQuery({
    queryKey: queryKeys.runs.checkpointFiles(ckpt.run_id, ckpt.step, ckpt.kind),
    queryFn: () =>
      unwrap(
        api.GET('/api/v1/runs/{run_id}/checkpoints/{step}/files', {
          params: { path: { run_id: ckpt.run_id, step: ckpt.step }, query: { kind: ckpt.kind } },
        }),
      ),
  });
  return (
    <>
      <ErrorNote error={files.error ?? error} />
      <ul className="files">
        {files.data?.data.map((f) => (
          <li key={f.name}>
            <button type="button" className="linklike" onClick={() => downloadCheckpoint(ckpt, f.name.split('/').pop() ?? f.name, f.name).catch(setError)}>
              {f.name}
            </button>{' '}
            <span className="muted">{formatBytes(f.size)}</span>
          </li>
        ))}
      </ul>
    </>
  );
}

/** The whole checkpoint as one tar; busy only while its link is made, then the browser's downloads show it. */
export function DownloadArchive({ ckpt }: { ckpt: Checkpoint }) {
  const [state, setState] = useState<{ busy: boolean; error: unknown }>({ busy: false, error: null });
  const name = `run-${ckpt.run_id}-${ckpt.kind}-step-${ckpt.step}.tar`;
  const download = () => {
    setState({ busy: true, error: null });
    downloadCheckpoint(ckpt, name)
      .then(() => setState({ busy: false, error: null }))
      .catch((error: unknown) => setState({ busy: false, error }));
  };
  return (
    <>
      <button type="button" onClick={download} disabled={state.busy} title={name}>
        {state.busy ? 'Starting download…' : `Download (${formatBytes(ckpt.size)} .tar)`}
      </button>
      <ErrorNote error={state.error} />
    </>
  );
}

/** The run's own evaluations at a checkpoint; `decoding` is how they drew their answers (the run's config.decoding). */
export function EvalList({ values, step, decoding }: { values: EvalValue[] | undefined; step: number; decoding: string | null }) {
  if (!values) return <span className="muted">…</span>;
  if (!values.length) return <span className="muted">no evaluation by this step</span>;
  return (
    <dl className="kv">
      {values.map((v) => (
        <div key={v.key}>
          <dt>{v.key}</dt>
          <dd className="num">
            <MetricValue metricKey={v.key} value={v.value} decoding={decoding} />
            {v.step !== step && <span className="muted"> (step {v.step})</span>}
          </dd>
        </div>
      ))}
    </dl>
  );
}

export function MetadataList({ ckpt }: { ckpt: Checkpoint }) {
  // The kind has its own column.
  const lines = metadataLines(ckpt.metadata, ['kind']);
  return (
    <dl className="kv">
      {lines.map(([k, v]) => (
        <div key={k}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
      <div>
        <dt>sha256</dt>
        <dd>
          <code title={ckpt.sha256}>{ckpt.sha256.slice(0, 12)}…</code>
        </dd>
      </div>
    </dl>
  );
}

/** New run from the source run's spec as submitted, its model at this checkpoint, under a new name. */
export function StartFromCheckpoint({ run, step }: { run: RunDetail; step: number }) {
  const query = new URLSearchParams({ clone: String(run.id), model: `run:${run.id}@${step}`, name: `${run.name}-from-step-${step}` });
  return <Link to={`/new?${query}`}>Start a run from this checkpoint</Link>;
}

/**
 * New run with an eval spec judging this checkpoint on the run's data with its reward (built by the New run
 * page from ?from=); an export is the run's output, which `run:<id>` names.
 */
export function EvaluateCheckpoint({ run, ckpt }: { run: RunDetail; ckpt: Checkpoint }) {
  const model = ckpt.kind === 'export' ? `run:${run.id}` : `run:${run.id}@${ckpt.step}`;
  const query = new URLSearchParams({ algorithm: 'eval', from: String(run.id), model });
  return <Link to={`/new?${query}`}>Evaluate</Link>;
}
