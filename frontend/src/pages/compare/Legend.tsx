import { useState, type FormEvent } from 'react';
import { Link } from 'react-router';
import { StatusBadge } from '../../components/StatusBadge';
import { runColor } from './colors';
import type { ComparedRun } from './useCompareData';

interface Props {
  runs: readonly ComparedRun[];
  onRemove: (id: number) => void;
  onAdd: (id: number) => void;
}

export function Legend({ runs, onRemove, onAdd }: Props) {
  return (
    <div className="compare-legend">
      <ul aria-label="Compared runs">
        {runs.map((r, i) => (
          <li key={r.id} data-run={r.id} className={r.error ? 'has-error' : undefined}>
            <span className="swatch" style={{ background: runColor(i) }} aria-hidden="true" />
            <Link to={`/runs/${r.id}`}>
              #{r.id} {r.run?.name ?? ''}
            </Link>
            {r.run && <StatusBadge status={r.run.status} />}
            {r.run && <span className="muted">{r.run.algorithm}</span>}
            {r.loading && <span className="muted">loading…</span>}
            {r.error && (
              <span role="alert" className="error">
                {r.error}
              </span>
            )}
            <button type="button" className="linklike" onClick={() => onRemove(r.id)} aria-label={`Remove run ${r.id} from comparison`}>
              remove
            </button>
          </li>
        ))}
      </ul>
      <AddRun existing={runs.map((r) => r.id)} onAdd={onAdd} />
    </div>
  );
}

function AddRun({ existing, onAdd }: { existing: number[]; onAdd: (id: number) => void }) {
  const [text, setText] = useState('');
  const [problem, setProblem] = useState('');
  const submit = (e: FormEvent) => {
    e.preventDefault();
    const id = Number(text.trim().replace(/^#/, ''));
    if (!Number.isSafeInteger(id) || id < 1) return setProblem('Run id: enter a positive whole number, e.g. 12.');
    if (existing.includes(id)) return setProblem(`Run ${id} is already compared.`);
    setProblem('');
    setText('');
    onAdd(id);
  };
  return (
    <form className="add-run" onSubmit={submit}>
      <label htmlFor="add-run-id">Add run</label>
      <input id="add-run-id" inputMode="numeric" placeholder="id" size={6} value={text} onChange={(e) => setText(e.target.value)} />
      <button type="submit">Add</button>
      {problem && <span className="error">{problem}</span>}
    </form>
  );
}
