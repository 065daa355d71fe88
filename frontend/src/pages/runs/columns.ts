import type { Run } from '../../api/types';

/** Spec fields a runs table can show beside the metrics (`run.config`); the user picks which. */
export const CONFIG_COLUMNS = [
  { id: 'model', label: 'Model' },
  { id: 'lr', label: 'LR' },
  { id: 'batch_size', label: 'Batch size' },
  { id: 'steps', label: 'Steps' },
  { id: 'precision', label: 'Precision' },
] as const;

export type ConfigColumn = (typeof CONFIG_COLUMNS)[number]['id'];

const KEY = 'rlplane.runs.columns';
export const DEFAULT_COLUMNS: ConfigColumn[] = ['model', 'lr', 'batch_size'];

const isColumn = (id: unknown): id is ConfigColumn => CONFIG_COLUMNS.some((c) => c.id === id);

/** The chosen columns, kept in the browser like the chart pins (a preference, not part of a shared link). */
export function loadColumns(): ConfigColumn[] {
  try {
    const stored: unknown = JSON.parse(localStorage.getItem(KEY) ?? 'null');
    if (Array.isArray(stored)) return CONFIG_COLUMNS.map((c) => c.id).filter((id) => stored.includes(id) && isColumn(id));
  } catch {
    // A hand-edited or foreign value: the defaults.
  }
  return DEFAULT_COLUMNS;
}

export function saveColumns(columns: readonly ConfigColumn[]): void {
  localStorage.setItem(KEY, JSON.stringify(columns));
}

/** A config value as written in the spec (0.0003 stays 0.0003, not 3.000e-4). */
export function configValue(run: Run, column: ConfigColumn): string {
  const value = run.config?.[column];
  return value == null || value === '' ? '—' : String(value);
}
