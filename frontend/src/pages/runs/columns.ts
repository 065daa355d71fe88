import type { Run } from '../../api/types';

/** Spec fields a runs table can show beside the metrics (`run.config`); the user picks which. */
export const CONFIG_COLUMNS = [
  { id: 'model', label: 'Model' },
  { id: 'lr', label: 'LR' },
  { id: 'batch_size', label: 'Batch size' },
  { id: 'steps', label: 'Steps' },
  { id: 'precision', label: 'Precision' },
  // How an eval, grpo or ppo run's accuracies were drawn: greedy, sampled at T=1, ...
  { id: 'decoding', label: 'Decoding' },
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

/** A config value in few characters; a field the run does not have (the API sends null) is a dash. */
export function configValue(run: Run, column: ConfigColumn): string {
  const value = run.config?.[column];
  if (value == null || value === '') return '—';
  if (typeof value === 'number') return compactNumber(value);
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/**
 * Integers as they are (a batch size of 8); other numbers to 3 significant digits, small ones as
 * 3e-4, since a learning rate computed in Python arrives as 0.00030000000000000003.
 */
export function compactNumber(value: number): string {
  if (Number.isInteger(value) && Math.abs(value) < 1e6) return String(value);
  const rounded = Number(value.toPrecision(3));
  const tiny = rounded !== 0 && Math.abs(rounded) < 1e-3;
  return tiny || Math.abs(rounded) >= 1e6 ? rounded.toExponential().replace('e+', 'e') : String(rounded);
}
