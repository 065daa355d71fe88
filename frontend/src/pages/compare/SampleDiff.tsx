import { useMemo } from 'react';
import type { Picked } from './PromptAcross';
import { wordDiff } from './wordDiff';

const describe = (p: Picked) => `${p.runLabel} · step ${p.sample.step} · answer ${p.sample.index}`;

/** The two picked answers' responses, word by word: what only the first has struck out, what only the second has marked. */
export function SampleDiff({ picked, onClear }: { picked: readonly Picked[]; onClear: () => void }) {
  const [a, b] = picked;
  const diff = useMemo(() => (a && b ? wordDiff(a.sample.response, b.sample.response) : null), [a, b]);
  if (!a) return null;
  return (
    <section className="cmp-diff" data-testid="sample-diff" aria-label="Diff of two answers" data-ready={diff != null}>
      <div className="cmp-diff-head">
        <strong>Diff</strong>
        <span>
          <span className="cmp-diff-from" data-testid="diff-from">
            − {describe(a)}
          </span>
          {b ? (
            <>
              {' → '}
              <span className="cmp-diff-to" data-testid="diff-to">
                + {describe(b)}
              </span>
            </>
          ) : (
            <span className="muted"> · pick one more answer to compare</span>
          )}
        </span>
        {diff && (
          <span className="muted" data-testid="diff-counts">
            {diff.removed} removed, {diff.added} added{diff.exact ? '' : ' (too long to align word by word)'}
          </span>
        )}
        <button type="button" className="linklike" onClick={onClear}>
          Clear
        </button>
      </div>
      {diff && (
        <pre className="cmp-diff-text" data-testid="diff-output">
          {diff.parts.map((p, i) =>
            p.op === 'same' ? (
              <span key={i}>{p.text}</span>
            ) : p.op === 'del' ? (
              <del key={i} data-op="del">
                {p.text}
              </del>
            ) : (
              <ins key={i} data-op="ins">
                {p.text}
              </ins>
            ),
          )}
        </pre>
      )}
    </section>
  );
}
