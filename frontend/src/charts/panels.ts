/** A titled group of metric keys, drawn as one chart per key. */
export interface Panel {
  title: string;
  keys: string[];
}

const last = (key: string) => key.slice(key.lastIndexOf('/') + 1);
const DIAGNOSTICS = new Set(['clipfrac', 'approx_kl', 'entropy', 'value_clipfrac', 'zero_std_groups']);

// Order is the order an RLHF practitioner reads a run in (docs/dashboard.md): is reward going up,
// is the policy drifting (KL), are losses sane, is the PPO/GRPO update healthy (clipping, approx
// KL, entropy), then evaluation, optimiser health and throughput. The first rule that matches wins.
const RULES: Array<{ title: string; match: (key: string) => boolean }> = [
  { title: 'Reward', match: (k) => /^rewards?\//.test(k) },
  { title: 'KL', match: (k) => /^kl(_coef)?$/.test(last(k)) || /^ppo\/kl/.test(k) },
  { title: 'Losses', match: (k) => last(k).includes('loss') },
  // Rollout statistics (the critic's values, response length) read with the update's health.
  { title: 'PPO diagnostics', match: (k) => DIAGNOSTICS.has(last(k)) || /^(ppo|grpo|values|gen)\//.test(k) },
  // eval/reward (the run's reward on held-out prompts) and eval/optimality (randomwalks) read like accuracy.
  { title: 'Eval accuracy & margins', match: (k) => /accuracy|margin|optimality/.test(last(k)) || /^eval\/reward/.test(k) },
  { title: 'Learning rate', match: (k) => last(k) === 'lr' || last(k) === 'learning_rate' },
  { title: 'Gradient norm', match: (k) => last(k) === 'grad_norm' || last(k) === 'skipped_steps' },
  { title: 'Performance', match: (k) => k.startsWith('perf/') },
];

// Inside a panel the headline key comes first (reward/mean before its components), then
// shallower keys (eval/accuracy before eval/reward/arithmetic), then by name.
const HEADLINE = new Set(['mean', 'loss', 'kl']);
const depth = (k: string) => k.split('/').length;
export function compareKeys(a: string, b: string): number {
  return (
    Number(!HEADLINE.has(last(a))) - Number(!HEADLINE.has(last(b))) || depth(a) - depth(b) || (a < b ? -1 : a > b ? 1 : 0)
  );
}

/** Groups keys into the known RLHF panels (only those with keys), then one "Other" panel. */
export function groupPanels(keys: readonly string[]): Panel[] {
  const panels = RULES.map((r) => ({ title: r.title, keys: [] as string[] }));
  const other: string[] = [];
  for (const key of keys) {
    const i = RULES.findIndex((r) => r.match(key));
    if (i >= 0) panels[i]!.keys.push(key);
    else other.push(key);
  }
  const out = panels.filter((p) => p.keys.length > 0);
  if (other.length) out.push({ title: 'Other', keys: other });
  for (const p of out) p.keys.sort(compareKeys);
  return out;
}

/** Keys matching every whitespace-separated term of the search box (case-insensitive). */
export function searchKeys(keys: readonly string[], query: string): string[] {
  const terms = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (terms.length === 0) return [...keys];
  return keys.filter((k) => {
    const key = k.toLowerCase();
    return terms.every((t) => key.includes(t));
  });
}
