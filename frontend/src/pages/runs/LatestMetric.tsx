import { useMetricKeys } from '../../api/queries';
import type { KeySummary } from '../../api/types';
import { formatNumber } from '../../lib/format';

// Reward says most about an RL run; runs without one (SFT) are judged by their loss.
const PREFERRED = ['reward/mean', 'rewards/mean', 'train/reward', 'reward', 'rewards/chosen', 'train/loss', 'loss'];

export function pickHeadline(keys: readonly KeySummary[]): KeySummary | undefined {
  for (const name of PREFERRED) {
    const hit = keys.find((k) => k.key === name);
    if (hit) return hit;
  }
  return keys.find((k) => /^rewards?\//.test(k.key)) ?? keys.find((k) => k.key.includes('loss'));
}

/** The list endpoint has no metrics, so each visible row asks for its own key summary. */
export function LatestMetric({ runId, live }: { runId: number; live: boolean }) {
  const keys = useMetricKeys(runId, live);
  const headline = keys.data ? pickHeadline(keys.data.data) : undefined;
  if (!headline) return <span className="muted">—</span>;
  return (
    <span title={`${headline.key} at step ${headline.last_step}`}>
      <span className="muted">{headline.key}</span> {formatNumber(headline.last_value)}
    </span>
  );
}
