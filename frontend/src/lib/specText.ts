import { stringify } from 'yaml';

export interface SpecSource {
  /** YAML to read or edit. */
  text: string;
  /** submitted: the text as sent (comments kept); json: sent as JSON, shown as YAML; stored: the spec with defaults. */
  origin: 'submitted' | 'json' | 'stored';
}

/**
 * A run's spec as its author wrote it: `spec_text` (comments kept), else the stored spec (every default
 * filled in) for runs from before the text was kept. JSON has no comments to lose and reads better as YAML.
 */
export function specSource(run: { spec: Record<string, unknown>; spec_text: string | null }): SpecSource {
  const text = run.spec_text;
  if (text == null) return { text: stringify(run.spec, { lineWidth: 0 }), origin: 'stored' };
  if (text.trimStart().startsWith('{')) {
    try {
      return { text: stringify(JSON.parse(text), { lineWidth: 0 }), origin: 'json' };
    } catch {
      // A YAML flow map, not JSON: shown as written.
    }
  }
  return { text, origin: 'submitted' };
}
