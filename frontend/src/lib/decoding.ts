// An accuracy depends on how its answers were drawn: one checkpoint can read 0.80 greedy and 0.51 sampled at T=1.
// The API words it (api/runs/views.py decoding(): "greedy", "sampled at T=0.7, 8 per prompt"); these helpers are
// the dashboard's one way to show it beside an accuracy.

/** Keys counting right answers, whose value depends on the decoding: eval/accuracy, eval/pass@<k>, eval/success. */
export function isAccuracyKey(key: string): boolean {
  return /^eval\/(accuracy|success|pass@\d+)$/.test(key);
}

/** A run's decoding from its config (null for runs that draw no answers, or an API that does not send it). */
export function runDecoding(config: Record<string, unknown> | null | undefined): string | null {
  const decoding = config?.decoding;
  return typeof decoding === 'string' && decoding ? decoding : null;
}

/** The API's words in a few characters: greedy, T=1, T=0.7 ×8 (answers per prompt); other words as they are. */
export function decodingLabel(decoding: string): string {
  const sampled = /^sampled at (T=[^,]+)(?:, (\d+) per prompt)?$/.exec(decoding);
  if (!sampled) return decoding;
  return sampled[2] ? `${sampled[1]} ×${sampled[2]}` : sampled[1]!;
}
