import { decodingLabel, isAccuracyKey } from '../lib/decoding';
import { formatNumber } from '../lib/format';

interface Props {
  metricKey: string;
  /** How the answers behind the key were drawn (the API's words); null: nothing to say. */
  decoding: string | null | undefined;
}

/** After an accuracy-like key or value: its decoding, short (greedy, T=1 ×8), the API's words as its title. */
export function DecodingTag({ metricKey, decoding }: Props) {
  if (!decoding || !isAccuracyKey(metricKey)) return null;
  return (
    <>
      {' '}
      <span className="decoding" title={`answers drawn: ${decoding}`}>
        {decodingLabel(decoding)}
      </span>
    </>
  );
}

/** A metric's value, and where it is an accuracy and has one, its decoding; a dash and nothing else when absent. */
export function MetricValue({ metricKey, value, decoding }: Props & { value: number | string | null | undefined }) {
  return (
    <>
      {formatNumber(value)}
      {value != null && <DecodingTag metricKey={metricKey} decoding={decoding} />}
    </>
  );
}
