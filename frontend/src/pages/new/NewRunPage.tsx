import { useEffect, useRef, useState } from 'react';
import { useNavigate, useSearchParams } from 'react-router';
import { api, authFetch, unwrap } from '../../api/client';
import { ALGORITHMS, type Algorithm } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { cloneText, fieldErrors, isAlgorithm, TEMPLATES, withModelPath, type FieldError } from './spec';
import './newRun.css';

const YAML_HEADERS = { 'Content-Type': 'application/yaml' };

interface Checked {
  total_steps: number;
  parents: Array<{ run_id: number; name: string; field: string; step: number | null }>;
}

type Verdict = { state: 'idle' | 'checking' } | { state: 'valid'; checked: Checked } | { state: 'invalid'; errors: FieldError[] };

async function send(path: string, text: string): Promise<{ status: number; body: unknown }> {
  const response = await authFetch(path, { method: 'POST', headers: YAML_HEADERS, body: text });
  const body = await response.json().catch(() => null);
  return { status: response.status, body };
}

function errorsOf(text: string, status: number, body: unknown): FieldError[] {
  const detail = (body as { detail?: unknown } | null)?.detail ?? `HTTP ${status}`;
  return fieldErrors(text, detail);
}

function initialText(params: URLSearchParams): string {
  const algorithm = params.get('algorithm');
  const text = TEMPLATES[isAlgorithm(algorithm) ? algorithm : 'sft'];
  const model = params.get('model');
  return model ? withModelPath(text, model) : text;
}

/** Moves the caret to a 1-based line of the textarea and scrolls it into view. */
function goToLine(area: HTMLTextAreaElement, line: number) {
  const lines = area.value.split('\n');
  const offset = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  area.focus();
  area.setSelectionRange(offset, offset + (lines[line - 1]?.length ?? 0));
  const lineHeight = area.scrollHeight / Math.max(1, lines.length);
  area.scrollTop = Math.max(0, (line - 3) * lineHeight);
}

export function NewRunPage() {
  const [params] = useSearchParams();
  const navigate = useNavigate();
  const cloneId = Number(params.get('clone')) || null;
  const [text, setText] = useState(() => (cloneId ? '' : initialText(params)));
  const [template, setTemplate] = useState<Algorithm>(() => {
    const a = params.get('algorithm');
    return isAlgorithm(a) ? a : 'sft';
  });
  const [edited, setEdited] = useState(false);
  const [verdict, setVerdict] = useState<Verdict>({ state: 'idle' });
  const [submitting, setSubmitting] = useState(false);
  const [loadError, setLoadError] = useState<unknown>(null);
  const area = useRef<HTMLTextAreaElement>(null);

  useEffect(() => {
    if (!cloneId) return;
    unwrap(api.GET('/api/v1/runs/{run_id}', { params: { path: { run_id: cloneId } } }))
      .then((run) => setText(cloneText(run.spec)))
      .catch(setLoadError);
  }, [cloneId]);

  // Ask the API after each pause in typing; the newest text wins.
  useEffect(() => {
    if (!text.trim()) return;
    let current = true;
    setVerdict({ state: 'checking' });
    const timer = setTimeout(async () => {
      try {
        const { status, body } = await send('/api/v1/runs/validate', text);
        if (!current) return;
        if (status === 200) setVerdict({ state: 'valid', checked: body as Checked });
        else setVerdict({ state: 'invalid', errors: errorsOf(text, status, body) });
      } catch (err) {
        if (current) setVerdict({ state: 'invalid', errors: fieldErrors(text, String(err)) });
      }
    }, 500);
    return () => {
      current = false;
      clearTimeout(timer);
    };
  }, [text]);

  const loadTemplate = (next: Algorithm) => {
    if (edited && !window.confirm(`Replace your edits with the ${next} template?`)) return;
    setTemplate(next);
    setText(TEMPLATES[next]);
    setEdited(false);
  };

  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    setSubmitting(true);
    try {
      const { status, body } = await send('/api/v1/runs', text);
      if (status === 201) {
        navigate(`/runs/${(body as { id: number }).id}`);
        return;
      }
      setVerdict({ state: 'invalid', errors: errorsOf(text, status, body) });
    } catch (err) {
      setVerdict({ state: 'invalid', errors: fieldErrors(text, String(err)) });
    } finally {
      setSubmitting(false);
    }
  };

  const errors = verdict.state === 'invalid' ? verdict.errors : [];
  return (
    <section className="new-run">
      <h1>New run</h1>
      <form onSubmit={submit}>
        <div className="new-run-bar">
          <label htmlFor="template">Template</label>
          <select id="template" value={template} onChange={(e) => loadTemplate(e.target.value as Algorithm)}>
            {ALGORITHMS.map((a) => (
              <option key={a} value={a}>
                {a}
              </option>
            ))}
          </select>
          {cloneId && <span className="muted">cloned from run #{cloneId}</span>}
          <span className="spacer" />
          <button type="submit" disabled={submitting || !text.trim()}>
            {submitting ? 'Submitting…' : 'Submit run'}
          </button>
        </div>
        <ErrorNote error={loadError} />
        <label htmlFor="spec-text">Run spec (YAML)</label>
        <textarea
          id="spec-text"
          ref={area}
          className="spec-editor"
          spellCheck={false}
          value={text}
          rows={30}
          aria-invalid={errors.length > 0}
          aria-describedby="spec-check"
          onChange={(e) => {
            setText(e.target.value);
            setEdited(true);
          }}
        />
      </form>
      <div id="spec-check" className="spec-check" aria-live="polite">
        {verdict.state === 'checking' && <p className="muted">Checking with the server…</p>}
        {verdict.state === 'valid' && (
          <p className="ok" data-testid="spec-valid">
            Valid · {verdict.checked.total_steps} steps
            {verdict.checked.parents.length > 0 &&
              ` · parents: ${verdict.checked.parents
                .map((p) => `#${p.run_id} ${p.name} (${p.field}${p.step != null ? ` @${p.step}` : ''})`)
                .join(', ')}`}
          </p>
        )}
        {errors.length > 0 && (
          <ul className="spec-errors" aria-label="Problems in the spec">
            {errors.map((err, i) => (
              <li key={`${err.field}-${i}`}>
                <button type="button" className="linklike" onClick={() => area.current && goToLine(area.current, err.line)}>
                  line {err.line}
                </button>{' '}
                {err.field && <code>{err.field}</code>} {err.field && '— '}
                {err.message}
              </li>
            ))}
          </ul>
        )}
      </div>
    </section>
  );
}
