import { useState } from 'react';
import { Link } from 'react-router';
import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { downloadFile } from '../../api/download';
import type { Checkpoint } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { formatBytes, formatDate } from '../../lib/format';
import { useRunContext } from './context';

function Files({ ckpt }: { ckpt: Checkpoint }) {
  const [error, setError] = useState<unknown>(null);
  const files = useQuery({
    queryKey: ['ckpt-files', ckpt.run_id, ckpt.step, ckpt.kind],
    queryFn: () =>
      unwrap(
        api.GET('/api/v1/runs/{run_id}/checkpoints/{step}/files', {
          params: { path: { run_id: ckpt.run_id, step: ckpt.step }, query: { kind: ckpt.kind } },
        }),
      ),
  });
  const url = (name: string) =>
    `/api/v1/runs/${ckpt.run_id}/checkpoints/${ckpt.step}/files/${name.split('/').map(encodeURIComponent).join('/')}?kind=${ckpt.kind}`;
  return (
    <>
      <ErrorNote error={files.error ?? error} />
      <ul className="files">
        {files.data?.data.map((f) => (
          <li key={f.name}>
            <button type="button" className="linklike" onClick={() => downloadFile(url(f.name), f.name.split('/').pop() ?? f.name).catch(setError)}>
              {f.name}
            </button>{' '}
            <span className="muted">{formatBytes(f.size)}</span>
          </li>
        ))}
      </ul>
    </>
  );
}

export function CheckpointsTab() {
  const { run } = useRunContext();
  const [open, setOpen] = useState<number | null>(null);
  const list = useQuery({
    queryKey: ['checkpoints', run.id],
    queryFn: () => unwrap(api.GET('/api/v1/runs/{run_id}/checkpoints', { params: { path: { run_id: run.id } } })),
    refetchInterval: 15_000,
  });
  if (list.error) return <ErrorNote error={list.error} />;
  if (!list.data) return <p className="muted">Loading checkpoints…</p>;
  if (list.data.count === 0) return <p className="muted">No checkpoints yet.</p>;
  return (
    <table className="checkpoints">
      <thead>
        <tr>
          <th scope="col">Step</th>
          <th scope="col">Kind</th>
          <th scope="col">Size</th>
          <th scope="col">Created</th>
          <th scope="col">Metadata</th>
          <th scope="col">Files</th>
          <th scope="col">Use</th>
        </tr>
      </thead>
      <tbody>
        {list.data.data.map((c) => (
          <tr key={c.id}>
            <th scope="row">{c.step}</th>
            <td>{c.kind}</td>
            <td>{formatBytes(c.size)}</td>
            <td>{formatDate(c.created_at)}</td>
            <td>
              <code className="meta">{JSON.stringify(c.metadata)}</code>
            </td>
            <td>
              {open === c.id ? (
                <Files ckpt={c} />
              ) : (
                <button type="button" onClick={() => setOpen(c.id)}>
                  List files
                </button>
              )}
            </td>
            <td>
              <Link to={`/new?model=${encodeURIComponent(`run:${run.id}@${c.step}`)}`}>Start a run from this checkpoint</Link>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
