import type { KeySummary, RunDetail } from '../../api/types';
import { MetricValue } from '../../components/Decoding';
import { runDecoding } from '../../lib/decoding';
import { sortEvalKeys } from '../../lib/evalMetrics';

interface Props {
  runs: ReadonlyArray<{ run: RunDetail; keys: readonly KeySummary[] }>;
}

/**
 * Each run's last value of every eval/* key, side by side: an eval run's whole result is one point per key,
 * which a chart hardly shows; an accuracy says how that run drew its answers (config.decoding), as two runs of
 * one checkpoint can differ by that alone. Read from the key lists the page already polls, so it costs no request.
 */
export function FinalValues({ runs }: Props) {
  const last = runs.map(({ keys }) => new Map(keys.filter((k) => k.key.startsWith('eval/')).map((k) => [k.key, k])));
  const keys = sortEvalKeys(last.flatMap((byKey) => [...byKey.keys()]));
  const decodings = runs.map(({ run }) => runDecoding(run.config));
  if (keys.length === 0) return null;
  return (
    <section className="final-values" aria-label="Final values">
      <h2>Final values</h2>
      <div className="final-values-scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">Metric</th>
              {runs.map(({ run }) => (
                <th scope="col" key={run.id}>
                  #{run.id} {run.name}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {keys.map((key) => (
              <tr key={key} data-key={key}>
                <th scope="row">
                  <code>{key}</code>
                </th>
                {last.map((byKey, i) => {
                  const summary = byKey.get(key);
                  return (
                    <td key={runs[i]!.run.id} className="num" title={summary ? `step ${summary.last_step}` : undefined}>
                      <MetricValue metricKey={key} value={summary?.last_value} decoding={decodings[i]} />
                    </td>
                  );
                })}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
