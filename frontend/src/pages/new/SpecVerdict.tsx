import type { FieldError } from './spec';

export interface Checked {
  total_steps: number;
  parents: Array<{ run_id: number; name: string; field: string; step: number | null }>;
}

/** POST /pipelines/validate's answer: each stage and the stages it waits for. */
export interface CheckedPipeline {
  stages: Array<{ name: string; needs: string[] }>;
}

export type Verdict =
  | { state: 'idle' }
  | { state: 'valid'; checked: Checked; warnings: FieldError[] }
  | { state: 'valid-pipeline'; checked: CheckedPipeline }
  | { state: 'invalid'; errors: FieldError[] };

function parentsText(parents: Checked['parents']): string {
  return parents.map((p) => `#${p.run_id} ${p.name} (${p.field}${p.step != null ? ` @${p.step}` : ''})`).join(', ');
}

/** Each problem with a link to its line (a problem about the request as a whole has none). */
function Problems({ className, label, items, onPick }: { className: string; label: string; items: FieldError[]; onPick: (line: number) => void }) {
  return (
    <ul className={className} aria-label={label}>
      {items.map((item, i) => (
        <li key={`${item.field}-${i}`}>
          {item.line != null && (
            <>
              <button type="button" className="linklike" onClick={() => item.line != null && onPick(item.line)}>
                line {item.line}
              </button>{' '}
            </>
          )}
          {item.field && (
            <>
              <code>{item.field}</code> —{' '}
            </>
          )}
          {item.message}
        </li>
      ))}
    </ul>
  );
}

/**
 * The server's verdict on the text: a summary when valid (with its warnings: accepted, but almost
 * certainly a mistake), else the errors; each names its field and links to its line.
 */
export function SpecVerdict({ id, verdict, stale, onPick }: { id: string; verdict: Verdict; stale: boolean; onPick: (line: number) => void }) {
  return (
    <div id={id} className={`spec-check${stale ? ' stale' : ''}`} aria-live="polite">
      {verdict.state === 'valid' && (
        <>
          <p className="ok" data-testid="spec-valid">
            Valid · {verdict.checked.total_steps} steps
            {verdict.checked.parents.length > 0 && ` · parents: ${parentsText(verdict.checked.parents)}`}
          </p>
          {verdict.warnings.length > 0 && <Problems className="spec-warnings" label="Warnings" items={verdict.warnings} onPick={onPick} />}
        </>
      )}
      {verdict.state === 'valid-pipeline' && (
        <p className="ok" data-testid="spec-valid">
          Valid pipeline · {verdict.checked.stages.length} stages:{' '}
          {verdict.checked.stages.map((s) => (s.needs.length ? `${s.name} (after ${s.needs.join(', ')})` : s.name)).join(' · ')}
        </p>
      )}
      {verdict.state === 'invalid' && <Problems className="spec-errors" label="Problems in the spec" items={verdict.errors} onPick={onPick} />}
    </div>
  );
}
