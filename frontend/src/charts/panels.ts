/** A titled group of metric keys, drawn as one chart per key. */
export interface Panel {
  title: string;
  keys: string[];
}

const last = (key: string) => key.slice(key.lastIndexOf('/') + 1);

// Order is the order an RLHF practitioner reads a run in: is reward going up, is the policy
// drifting (KL), are losses sane, then evaluation, optimiser health and throughput.
const RULES: Array<{ title: string; match: (key: string) => boolean }> = [
  { title: 'Reward', match: (k) => /^rewards?\//.test(k) },
  { title: 'KL', match: (k) => /^kl(_coef)?$/.test(last(k)) || /^ppo\/kl/.test(k) },
  { title: 'Losses', match: (k) => last(k).includes('loss') },
  // eval/reward (the run's reward on held-out prompts) and eval/optimality (randomwalks) read like accuracy.
  { title: 'Eval accuracy & margins', match: (k) => /accuracy|margin|optimality/.test(last(k)) || /^eval\/reward/.test(k) },
  { title: 'Learning rate', match: (k) => last(k) === 'lr' || last(k) === 'learning_rate' },
  { title: 'Gradient norm', match: (k) => last(k) === 'grad_norm' },
  { title: 'Performance', match: (k) => k.startsWith('perf/') },
];

/** Groups keys into the known RLHF panels (only those with keys), then one "Other" panel. */
export function groupPanels(keys: readonly string[]): Panel[] {
  const panels = RULES.map((r) => ({ title: r.title, keys: [] as string[] }));
  const other: string[] = [];
  for (const key of [...keys].sort()) {
    const i = RULES.findIndex((r) => r.match(key));
    if (i >= 0) panels[i]!.keys.push(key);
    else other.push(key);
  }
  const out = panels.filter((p) => p.keys.length > 0);
  if (other.length) out.push({ title: 'Other', keys: other });
  return out;
}
