import { Link } from 'react-router';
import type { CheckpointEvaluation } from '../../api/types';
import { MetricValue } from '../../components/Decoding';
import { StatusBadge } from '../../components/StatusBadge';
import { sortEvalKeys } from '../../lib/evalMetrics';

/** The eval runs of one checkpoint: a row each, a column per metric any of them reported; accuracies say each run's decoding. */
export function CheckpointEvaluations({ caption, evaluations }: { caption: string; evaluations: readonly CheckpointEvaluation[] }) {
  const keys = sortEvalKeys(evaluations.flatMap((e) => Object.keys(e.metrics)));
  return (
    <table className="evaluations">
      <caption>{caption}</caption>
      <thead>
        <tr>
          <th scope="col">Eval run</th>
          <th scope="col">Status</th>
          <th scope="col">Data</th>
          <th scope="col">Reward</th>
          <th scope="col">Samples</th>
          {keys.map((k) => (
            <th scope="col" key={k} title={k}>
              {k.replace(/^eval\//, '')}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>
        {evaluations.map((e) => (
          <tr key={e.run_id} data-run={e.run_id}>
            <th scope="row">
              <Link to={`/runs/${e.run_id}`}>
                #{e.run_id} {e.name}
              </Link>
            </th>
            <td>
              <StatusBadge status={e.status} />
            </td>
            <td>
              <code>{e.data}</code>
            </td>
            <td>
              <code>{e.reward}</code>
            </td>
            <td className="num">{e.samples}</td>
            {keys.map((k) => (
              <td key={k} className="num" data-key={k}>
                <MetricValue metricKey={k} value={e.metrics[k]} decoding={e.decoding} />
              </td>
            ))}
          </tr>
        ))}
      </tbody>
    </table>
  );
}
