import type { HeadlineMetric } from '../../api/types';
import { MetricValue } from '../../components/Decoding';

/**
 * The run's headline metric, which the API picks per algorithm and sends with the list (api/runs/headlines.py);
 * an accuracy says its decoding (the run's config.decoding).
 */
export function LatestMetric({ headline, decoding }: { headline: HeadlineMetric | null; decoding: string | null }) {
  if (!headline) return <span className="muted">—</span>;
  return (
    <span title={`${headline.key} at step ${headline.step}`}>
      <span className="muted">{headline.key}</span> <MetricValue metricKey={headline.key} value={headline.value} decoding={decoding} />
    </span>
  );
}
