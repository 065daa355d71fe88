import { useMetricKeys } from '../../api/queries';
import type { KeySummary } from '../../api/types';
import { formatNumber } from '../../lib/format';

/**
 * What says most about a run of each algorithm, best first: a held-out number where the run has one
 * (eval/*), else its training signal. DPO's rewards/chosen is not one: it falls while training works.
 */
const HEADLINES: Record<string, string[]> = {
  sft: ['eval/loss', 'train/loss'],
  reward: ['eval/accuracy', 'train/accuracy', 'eval/loss', 'train/loss'],
  dpo: ['eval/loss', 'rewards/margin', 'eval/margin', 'train/loss'],
  ppo: ['reward/mean', 'eval/reward'],
  grpo: ['reward/mean', 'eval/reward'],
  ilql: ['eval/optimality', 'eval/reward', 'train/loss'],
};
// An algorithm this list does not know yet.
const FALLBACK = ['eval/loss', 'reward/mean', 'train/loss', 'loss'];

export function pickHeadline(keys: readonly KeySummary[], algorithm: string): KeySummary | undefined {
  for (const name of HEADLINES[algorithm] ?? FALLBACK) {
    const hit = keys.find((k) => k.key === name);
    if (hit) return hit;
  }
  return keys.find((k) => k.key.endsWith('loss'));
}

/** The list endpoint has no metrics, so each visible row asks for its own key summary. */
export function LatestMetric({ runId, algorithm, live }: { runId: number; algorithm: string; live: boolean }) {
  const keys = useMetricKeys(runId, live);
  const headline = keys.data ? pickHeadline(keys.data.data, algorithm) : undefined;
  if (!headline) return <span className="muted">—</span>;
  return (
    <span title={`${headline.key} at step ${headline.last_step}`}>
      <span className="muted">{headline.key}</span> {formatNumber(headline.last_value)}
    </span>
  );
}
