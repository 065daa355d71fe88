import { useId } from 'react';
import { DecodingTag } from '../components/Decoding';
import { metricMeaning } from './metricMeanings';

/**
 * A chart's title: its key and, where metricMeanings.ts explains the key, its meaning as the key's title
 * and as a tooltip on an (i) button (shown on hover and on keyboard focus; Escape hides it). An accuracy says its
 * decoding after the key.
 */
export function MetricTitle({ metricKey, decoding }: { metricKey: string; decoding?: string | null }) {
  const tipId = useId();
  const meaning = metricMeaning(metricKey);
  const tag = <DecodingTag metricKey={metricKey} decoding={decoding} />;
  if (!meaning) {
    return (
      <span className="chart-key">
        {metricKey}
        {tag}
      </span>
    );
  }
  return (
    <span className="chart-title">
      <span className="chart-key" title={meaning}>
        {metricKey}
        {tag}
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
