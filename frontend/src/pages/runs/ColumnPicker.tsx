import { CONFIG_COLUMNS, type ConfigColumn } from './columns';

/** Which config columns the runs table shows; a disclosure so it takes no room until wanted. */
export function ColumnPicker({ shown, onChange }: { shown: readonly ConfigColumn[]; onChange: (next: ConfigColumn[]) => void }) {
  const toggle = (id: ConfigColumn) =>
    onChange(CONFIG_COLUMNS.map((c) => c.id).filter((c) => (c === id ? !shown.includes(c) : shown.includes(c))));
  return (
    <details className="column-picker">
      <summary>Columns{shown.length ? ` (${shown.length})` : ''}</summary>
      <fieldset>
        <legend>Config columns</legend>
        {CONFIG_COLUMNS.map((c) => (
          <label key={c.id} className="check">
            <input type="checkbox" checked={shown.includes(c.id)} onChange={() => toggle(c.id)} />
            {c.label}
          </label>
        ))}
      </fieldset>
    </details>
  );
}
