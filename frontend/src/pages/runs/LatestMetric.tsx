import type { HeadlineMetric } from '../../api/types';
import { formatNumber } from '../../lib/format';

/** The run's headline metric, which the API picks per algorithm and sends with the list (api/runs/headlines.py). */
export function LatestMetric({ headline }: { headline: HeadlineMetric | null }) {
  if (!headline) return <span className="muted">—</span>;
  return (
    <span title={`${headline.key} at step ${headline.step}`}>
      <span className="muted">{headline.key}</span> {formatNumber(headline.value)}
    </span>
  );
}
