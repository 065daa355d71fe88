import { RL_METRIC_PREFIXES } from '../api/algorithms';

/** A titled group of metric keys, drawn as one chart per key. */
export interface Panel {
  title: string;
  keys: string[];
}

const last = (key: string) => key.slice(key.lastIndexOf('/') + 1);

// Order is the order an RLHF practitioner reads a run in (docs/dashboard.md): is reward going up,
// is the policy drifting (KL), are losses sane, then the RL health of the PPO/GRPO update: how far
// it moved the policy (clipping, ratio, approx KL), whether it still explores and how long it
// answers, whether its groups teach anything, how its episodes go (grpo.environment: turns, tool calls, errors,
// cut-offs), whether the critic predicts. Then evaluation,
// optimiser health, an asynchronous run's pipeline (how stale its groups were, who waited on whom) and throughput. The first rule that matches wins. The last segment decides where
// it can, so TRL's keys (rloo/kl, rloo/clipfrac) land beside ours.
const RULES: Array<{ title: string; match: (key: string) => boolean }> = [
  { title: 'Reward', match: (k) => /^rewards?\//.test(k) },
  { title: 'Rollout engine', match: (k) => k.startsWith('rollout/') },
  { title: 'KL', match: (k) => /^(kl|kl_coef|reward_kl)$/.test(last(k)) || /^ppo\/kl/.test(k) },
  { title: 'Losses', match: (k) => last(k).includes('loss') },
  { title: 'Clipping & ratio', match: (k) => /clipfrac|^approx_kl$|^ratio_(mean|min|max)$/.test(last(k)) },
  { title: 'Entropy & length', match: (k) => last(k) === 'entropy' || last(k) === 'overlong_penalty' || k.startsWith('gen/') },
  { title: 'Groups', match: (k) => last(k) === 'zero_std_groups' },
  { title: 'Environment', match: (k) => k.startsWith('env/') },
  { title: 'Critic', match: (k) => last(k) === 'explained_variance' || k.startsWith('values/') },
  // our algorithms' own diagnostics (the algorithm table's metric prefixes), and TRL's RLOO beside them
  { title: 'RL diagnostics', match: (k) => [...RL_METRIC_PREFIXES, 'rloo'].includes(k.split('/')[0]!) && k.includes('/') },
  // eval/reward (the run's reward on held-out prompts) and eval/optimality (randomwalks) read like accuracy.
  { title: 'Eval accuracy & margins', match: (k) => /accuracy|margin|optimality|success/.test(last(k)) || /^eval\/reward/.test(k) },
  { title: 'Learning rate', match: (k) => last(k) === 'lr' || last(k) === 'learning_rate' },
  { title: 'Gradient norm', match: (k) => last(k) === 'grad_norm' || last(k) === 'skipped_steps' },
  { title: 'Async RL', match: (k) => k.startsWith('async/') },
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
