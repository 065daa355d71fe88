import type { GitState } from './environment';
import { shortHash } from './environment';

/** A commit, and what was not committed: the diff folded away (it can be long), untracked files listed. */
export function GitStateView({ git, label }: { git: GitState; label: string }) {
  const lines = git.diff ? git.diff.split('\n').length : 0;
  return (
    <div className="git-state" aria-label={label}>
      <dl className="kv">
        <div>
          <dt>git commit</dt>
          <dd>
            {git.commit ? (
              <code title={git.commit} data-testid="git-commit">
                {shortHash(git.commit)}
              </code>
            ) : (
              <span className="muted">not a git repository</span>
            )}{' '}
            {git.dirty && <span className="badge badge-dirty">uncommitted changes</span>}
          </dd>
        </div>
      </dl>
      {git.diff && (
        <details className="git-diff">
          <summary>
            git diff HEAD <span className="muted">({lines} lines)</span>
          </summary>
          <pre aria-label={`${label}: uncommitted diff`}>{git.diff}</pre>
        </details>
      )}
      {git.untracked.length > 0 && (
        <details className="git-untracked">
          <summary>
            {git.untracked.length} untracked file{git.untracked.length > 1 ? 's' : ''}
          </summary>
          <pre>{git.untracked.join('\n')}</pre>
        </details>
      )}
    </div>
  );
}
