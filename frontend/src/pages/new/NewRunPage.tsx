import { useEffect, useRef, useState } from 'react';
import { useNavigate, useSearchParams } from 'react-router';
import { api, authFetch, unwrap } from '../../api/client';
import { ALGORITHMS, type Algorithm } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { goToLine, SpecEditor } from './SpecEditor';
import { SpecVerdict, type Checked, type CheckedPipeline, type Verdict } from './SpecVerdict';
import { evalText } from './evalSpec';
import { cloneText, fieldErrors, isAlgorithm, isPipelineText, PIPELINE_TEMPLATES, TEMPLATES, withModelPath, type FieldError } from './spec';
import './newRun.css';

const YAML_HEADERS = { 'Content-Type': 'application/yaml' };

async function send(path: string, text: string): Promise<{ status: number; body: unknown }> {
  const response = await authFetch(path, { method: 'POST', headers: YAML_HEADERS, body: text });
  const body = await response.json().catch(() => null);
  return { status: response.status, body };
}

function errorsOf(text: string, status: number, body: unknown): FieldError[] {
  const detail = (body as { detail?: unknown } | null)?.detail ?? `HTTP ${status}`;
  return fieldErrors(text, detail);
}

interface Warned {
  warnings: Array<{ loc: string[]; msg: string }>;
}

function validVerdict(text: string, body: Checked & Warned): Verdict {
  return { state: 'valid', checked: body, warnings: fieldErrors(text, body.warnings ?? []) };
}

/** What the Template menu offers: a run of each algorithm, or an example pipeline ("pipeline:steerlm"). */
type Template = Algorithm | `pipeline:${string}`;

/** The template to edit, with `model.path` from ?model= (a checkpoint to start from) when given; a pipeline as it
 * is (its stages name their own models). */
function templateText(template: Template, params: URLSearchParams): string {
  if (template.startsWith('pipeline:')) return PIPELINE_TEMPLATES[template.slice('pipeline:'.length)] ?? '';
  const model = params.get('model');
  const text = TEMPLATES[template as Algorithm];
  return model ? withModelPath(text, model) : text;
}

function initialAlgorithm(params: URLSearchParams): Algorithm {
  const a = params.get('algorithm');
  return isAlgorithm(a) ? a : 'sft';
}

/** A new query (New run in the top bar from a clone, another checkpoint) starts the form afresh. */
export function NewRunPage() {
  const [params] = useSearchParams();
  return <NewRunForm key={params.toString()} params={params} />;
}

function NewRunForm({ params }: { params: URLSearchParams }) {
  const navigate = useNavigate();
  const cloneId = Number(params.get('clone')) || null;
  // ?name= and ?model= come with "Start a run from this checkpoint".
  const cloneName = params.get('name');
  const model = params.get('model');
  // ?algorithm=eval&from= comes with "Evaluate": the checkpoint judged on its run's data with its reward.
  const evalFrom = initialAlgorithm(params) === 'eval' ? Number(params.get('from')) || null : null;
  const sourceId = cloneId ?? evalFrom;
  const [template, setTemplate] = useState<Template>(() => initialAlgorithm(params));
  const [text, setText] = useState(() => (sourceId ? '' : templateText(initialAlgorithm(params), params)));
  const [note, setNote] = useState<string | null>(null);
  const [verdict, setVerdict] = useState<Verdict>({ state: 'idle' });
  const [checking, setChecking] = useState(false);
  const [submitting, setSubmitting] = useState(false);
  const [loadError, setLoadError] = useState<unknown>(null);
  const area = useRef<HTMLTextAreaElement>(null);
  // Bumped by each check and by submit, so an older answer never replaces a newer one.
  const generation = useRef(0);

  useEffect(() => {
    if (!sourceId) return;
    let current = true;
    const evalModel = model || `run:${sourceId}`;
    unwrap(api.GET('/api/v1/runs/{run_id}', { params: { path: { run_id: sourceId } } }))
      .then((run) => {
        if (!current) return;
        if (!cloneId) {
          const draft = evalText(evalModel, run);
          setText(draft.text);
          setNote(draft.note);
          return;
        }
        const algorithm = run.spec.algorithm;
        if (typeof algorithm === 'string' && isAlgorithm(algorithm)) setTemplate(algorithm);
        const text = cloneText(run, cloneName || `${run.name}-clone`);
        setText(model ? withModelPath(text, model) : text);
      })
      .catch((err: unknown) => {
        if (!current) return;
        setLoadError(err);
        // Without the source run the checkpoint can still be judged: data and reward are left to the author.
        if (!cloneId) setText(evalText(evalModel).text);
      });
    return () => {
      current = false;
    };
  }, [sourceId, cloneId, cloneName, model]);

  // Ask the API after each pause in typing; the newest text wins.
  useEffect(() => {
    const mine = ++generation.current;
    if (!text.trim()) {
      setChecking(false);
      setVerdict({ state: 'idle' });
      return;
    }
    setChecking(true);
    const timer = setTimeout(async () => {
      let next: Verdict;
      try {
        // A pipeline (a document with stages) is checked, and submitted, as one: docs/pipelines.md.
        const pipeline = isPipelineText(text);
        const { status, body } = await send(pipeline ? '/api/v1/pipelines/validate' : '/api/v1/runs/validate', text);
        if (status !== 200) next = { state: 'invalid', errors: errorsOf(text, status, body) };
        else next = pipeline ? { state: 'valid-pipeline', checked: body as CheckedPipeline } : validVerdict(text, body as Checked & Warned);
      } catch (err) {
        next = { state: 'invalid', errors: fieldErrors(text, `Could not reach the server: ${String(err)}`) };
      }
      if (mine !== generation.current) return;
      setVerdict(next);
      setChecking(false);
    }, 500);
    return () => clearTimeout(timer);
  }, [text]);

  const loadTemplate = (next: Template) => {
    const changed = text.trim() !== '' && text !== templateText(template, params);
    const what = next.startsWith('pipeline:') ? `${next.slice('pipeline:'.length)} pipeline` : `${next} template`;
    if (changed && !window.confirm(`Replace the spec in the editor with the ${what}? Your changes will be lost.`)) return;
    setTemplate(next);
    setText(templateText(next, params));
  };

  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    const mine = ++generation.current;
    setSubmitting(true);
    setChecking(false);
    try {
      const pipeline = isPipelineText(text);
      const { status, body } = await send(pipeline ? '/api/v1/pipelines' : '/api/v1/runs', text);
      if (status === 201 && pipeline) {
        navigate(`/pipelines/${(body as { id: number }).id}`);
        return;
      }
      if (status === 201) {
        // The run page shows the submit's warnings: this page is gone by then.
        const { id, warnings } = body as { id: number } & Warned;
        navigate(`/runs/${id}`, warnings?.length ? { state: { warnings: fieldErrors(text, warnings) } } : undefined);
        return;
      }
      if (mine === generation.current) setVerdict({ state: 'invalid', errors: errorsOf(text, status, body) });
    } catch (err) {
      if (mine === generation.current) setVerdict({ state: 'invalid', errors: fieldErrors(text, `Could not reach the server: ${String(err)}`) });
    } finally {
      setSubmitting(false);
    }
  };

  const invalid = verdict.state === 'invalid';
  return (
    <section className="new-run">
      <h1>New run</h1>
      <form onSubmit={submit}>
        <div className="new-run-bar">
          <label htmlFor="template">Template</label>
          <select id="template" value={template} onChange={(e) => loadTemplate(e.target.value as Template)}>
            <optgroup label="Runs">
              {ALGORITHMS.map((a) => (
                <option key={a} value={a}>
                  {a}
                </option>
              ))}
            </optgroup>
            <optgroup label="Pipelines">
              {Object.keys(PIPELINE_TEMPLATES).map((name) => (
                <option key={name} value={`pipeline:${name}`}>
                  {name} pipeline
                </option>
              ))}
            </optgroup>
          </select>
          {sourceId && (
            <span className="muted">
              {text ? `${cloneId ? 'cloned from' : 'evaluating a checkpoint of'} run #${sourceId}` : loadError ? '' : `loading run #${sourceId}…`}
            </span>
          )}
          <span className="spacer" />
          <span className="muted" aria-hidden={!checking}>
            {checking ? 'Checking…' : ''}
          </span>
          <button type="submit" disabled={submitting || !text.trim()}>
            {submitting ? 'Submitting…' : 'Submit run'}
          </button>
        </div>
        <ErrorNote error={loadError} />
        {note && <p className="spec-note">{note}</p>}
        <label htmlFor="spec-text">Run spec (YAML)</label>
        <p id="spec-keys" className="muted spec-keys">
          Tab indents by two spaces; press Escape, then Tab, to move on. Every field: docs/spec.md.
        </p>
        <SpecEditor
          id="spec-text"
          areaRef={area}
          value={text}
          onChange={setText}
          invalid={invalid}
          describedBy="spec-check spec-keys"
        />
      </form>
      <SpecVerdict id="spec-check" verdict={verdict} stale={checking} onPick={(line) => area.current && goToLine(area.current, line)} />
    </section>
  );
}


