import type { Sample } from '../../../api/types';

/**
 * The samples of one step that share a prompt: a GRPO group (every response to the prompt), a PPO
 * tracked prompt, a preference pair (chosen and rejected), an evaluation's generation beside the
 * dataset's answer; DPO logs a pair and a generation for the same prompt at the same step.
 */
export interface SampleGroup {
  key: string;
  step: number;
  prompt: string;
  promptHash: string;
  rollouts: Sample[];
  pairs: Pair[];
  generations: Sample[];
}

export interface Pair {
  chosen: Sample | undefined;
  rejected: Sample | undefined;
  /** chosen's score minus rejected's, as the trainer logged it (else computed from the two rewards). */
  margin: number | string | null;
}

export type Label = 'rollout' | 'generation' | 'chosen' | 'rejected';
export const labelOf = (s: Sample): Label => s.label ?? 'rollout';

/** Groups in the order their first sample comes (so a reward-sorted page puts the best group first). */
export function groupSamples(samples: readonly Sample[]): SampleGroup[] {
  const groups = new Map<string, { group: SampleGroup; chosen: Sample[]; rejected: Sample[] }>();
  for (const s of samples) {
    const key = `${s.step}:${s.prompt_hash}`;
    let entry = groups.get(key);
    if (!entry) {
      const group: SampleGroup = { key, step: s.step, prompt: s.prompt, promptHash: s.prompt_hash, rollouts: [], pairs: [], generations: [] };
      entry = { group, chosen: [], rejected: [] };
      groups.set(key, entry);
    }
    const label = labelOf(s);
    if (label === 'chosen') entry.chosen.push(s);
    else if (label === 'rejected') entry.rejected.push(s);
    else if (label === 'generation') entry.group.generations.push(s);
    else entry.group.rollouts.push(s);
  }
  return [...groups.values()].map(({ group, chosen, rejected }) => ({ ...group, pairs: pairUp(chosen, rejected) }));
}

/** The same prompt may come twice in one step (a repeated eval row): its pairs go in logged order. */
function pairUp(chosen: Sample[], rejected: Sample[]): Pair[] {
  const byIndex = (a: Sample, b: Sample) => a.index - b.index;
  chosen.sort(byIndex);
  rejected.sort(byIndex);
  return Array.from({ length: Math.max(chosen.length, rejected.length) }, (_, i) => {
    const c = chosen[i];
    const r = rejected[i];
    return { chosen: c, rejected: r, margin: marginOf(c, r) };
  });
}

function marginOf(chosen: Sample | undefined, rejected: Sample | undefined): number | string | null {
  const logged = chosen?.scores.margin ?? rejected?.scores.margin;
  if (logged != null) return logged;
  const [c, r] = [chosen?.reward, rejected?.reward];
  return typeof c === 'number' && typeof r === 'number' ? c - r : null;
}

/** One step's responses to one prompt, grouped per step (following a prompt across steps). */
export function groupByStep(samples: readonly Sample[]): SampleGroup[] {
  return groupSamples([...samples].sort((a, b) => a.step - b.step || a.index - b.index));
}

export interface Score {
  name: string;
  value: number | string;
  unit?: string;
}

/**
 * A response's numbers in reading order: reward, its components (reward/<name>), advantage, length,
 * KL, then anything else the trainer logged; `truncated` only when the response ran out of tokens.
 */
export function rolloutScores(s: Sample): Score[] {
  const { scores } = s;
  const out: Score[] = [];
  if (s.reward != null) out.push({ name: 'reward', value: s.reward });
  const names = Object.keys(scores).sort();
  for (const name of names.filter((n) => n.startsWith('reward/'))) out.push({ name, value: scores[name]! });
  if (scores.advantage != null) out.push({ name: 'advantage', value: scores.advantage });
  if (scores.length != null) out.push({ name: 'length', value: scores.length, unit: 'tokens' });
  if (s.kl != null) out.push({ name: 'KL', value: s.kl });
  const shown = new Set(['advantage', 'length', 'truncated', 'margin']);
  for (const name of names.filter((n) => !n.startsWith('reward/') && !shown.has(n))) out.push({ name, value: scores[name]! });
  if (scores.truncated === 1) out.push({ name: 'truncated', value: 'yes' });
  return out;
}

/** One side of a pair: the score it was given under the trainer's name for it (score, implicit_reward). */
export function pairScores(s: Sample): Score[] {
  const named = Object.entries(s.scores).filter(([name]) => name !== 'margin');
  if (named.length) return named.map(([name, value]) => ({ name, value }));
  return s.reward != null ? [{ name: 'reward', value: s.reward }] : [];
}

/** Mean, min and max reward of a group's responses (finite rewards only), for its summary line. */
export function rewardSummary(samples: readonly Sample[]): { mean: number; min: number; max: number } | null {
  const rewards = samples.map((s) => s.reward).filter((r): r is number => typeof r === 'number');
  if (!rewards.length) return null;
  const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
  return { mean, min: Math.min(...rewards), max: Math.max(...rewards) };
}
