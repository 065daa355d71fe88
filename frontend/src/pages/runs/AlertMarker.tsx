import { Link } from 'react-router';
import type { Alert } from '../../api/alerts';
import '../../components/alerts.css';

/** A row's "⚠ 2": its run has open alerts, named in the label; the run page lists them. */
export function AlertMarker({ runId, alerts }: { runId: number; alerts: readonly Alert[] | undefined }) {
  if (!alerts?.length) return null;
  const label = `${alerts.length} open alert${alerts.length === 1 ? '' : 's'}: ${alerts.map((a) => a.name).join(', ')}`;
  return (
    <Link to={`/runs/${runId}`} className="alert-marker" title={label} aria-label={label} data-testid="alert-marker">
      ⚠ {alerts.length}
    </Link>
  );
}
