import { useState } from 'react';
import { downloadFile } from '../../../api/download';
import type { CodeSource } from '../../../api/types';
import { ErrorNote } from '../../../components/ErrorNote';
import { formatBytes } from '../../../lib/format';
import { codeGit, shortHash } from './environment';
import { GitStateView } from './GitState';

/** The snapshot `rlplane submit --code DIR` uploaded, fetched with the token (a plain link could not send it). */
function SnapshotDownload({ sha256 }: { sha256: string }) {
  const [state, setState] = useState<{ busy: boolean; error: unknown }>({ busy: false, error: null });
  const name = `code-${shortHash(sha256, 12)}.tar.gz`;
  const download = () => {
    setState({ busy: true, error: null });
    downloadFile(`/api/v1/code/${sha256}`, name)
      .then(() => setState({ busy: false, error: null }))
      .catch((error: unknown) => setState({ busy: false, error }));
  };
  return (
    <>
      <button type="button" className="linklike" onClick={download} disabled={state.busy}>
        {state.busy ? 'Downloading…' : `Download ${name}`}
      </button>
      <ErrorNote error={state.error} />
    </>
  );
}

export function CodeSection({ code, external }: { code: CodeSource | null; external: boolean }) {
  if (!code) {
    return (
      <p className="muted">
        {external
          ? 'Its script ran from its own directory, outside any worker: its git state is under Environment.'
          : "None given: the command runs in the worker's working directory."}
      </p>
    );
  }
  const git = codeGit(code);
  return (
    <>
      <dl className="kv">
        {code.snapshot ? (
          <div>
            <dt>snapshot</dt>
            <dd>
              <code title={code.snapshot} data-testid="code-snapshot">
                {shortHash(code.snapshot, 12)}
              </code>{' '}
              {code.files != null && <span className="muted">{code.files} files</span>}{' '}
              {code.size != null && <span className="muted">{formatBytes(code.size)}</span>}{' '}
              <SnapshotDownload sha256={code.snapshot} />
            </dd>
          </div>
        ) : (
          <div>
            <dt>shared directory</dt>
            <dd>
              <code data-testid="code-path">{code.path}</code>
            </dd>
          </div>
        )}
      </dl>
      {git && <GitStateView git={git} label="Code" />}
    </>
  );
}
