import { useId } from 'react';
import { metricMeaning } from './metricMeanings';

/**
 * A chart's title: its key and, where metricMeanings.ts explains the key, its meaning as the key's title
 * and as a tooltip on an (i) button (shown on hover and on keyboard focus; Escape hides it).
 */
export function MetricTitle({ metricKey }: { metricKey: string }) {
  const tipId = useId();
  const meaning = metricMeaning(metricKey);
  if (!meaning) return <span className="chart-key">{metricKey}</span>;
  return (
    <span className="chart-title">
      <span className="chart-key" title={meaning}>
        {metricKey}
      </span>
      <button
        type="button"
        className="chart-info"
        aria-label={`About ${metricKey}`}
        aria-describedby={tipId}
        onKeyDown={(e) => e.key === 'Escape' && e.currentTarget.blur()}
      >
        i
      </button>
      <span role="tooltip" id={tipId} className="chart-tooltip">
        {meaning}
      </span>
    </span>
  );
}
