import type { Stage } from '../../api/pipelines';
import { StatusBadge } from '../../components/StatusBadge';

/**
 * Each stage's gate and reason in full, wrapped: the graph's boxes share one size and cut long
 * text, and a gate's reason ends with the value it compared (`...: it is 2.3`).
 */
export function StageDetails({ stages }: { stages: readonly Stage[] }) {
  const told = stages.filter((s) => s.when || s.reason);
  if (told.length === 0) return null;
  return (
    <section className="stage-details" aria-labelledby="stage-details-title">
      <h2 id="stage-details-title">Gates and reasons</h2>
      <table>
        <thead>
          <tr>
            <th scope="col">Stage</th>
            <th scope="col">Status</th>
            <th scope="col">Gate</th>
            <th scope="col">Reason</th>
          </tr>
        </thead>
        <tbody>
          {told.map((s) => (
            <tr key={s.name} data-stage={s.name}>
              <th scope="row">{s.name}</th>
              <td>
                <StatusBadge status={s.status} />
              </td>
              <td>
                {s.gate && s.gate.length > 0 ? (
                  // each comparison with the value it reads now, and whether it holds (the API's `gate`)
                  <ul className="gate-values">
                    {s.gate.map((line) => (
                      <li key={line}>
                        <code>{line}</code>
                      </li>
                    ))}
                  </ul>
                ) : s.when ? (
                  <code>{s.when}</code>
                ) : (
                  <span className="muted">none</span>
                )}
              </td>
              <td>{s.reason ?? <span className="muted">—</span>}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
