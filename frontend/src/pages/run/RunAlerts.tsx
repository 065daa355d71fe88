import { useId, useState } from 'react';
import { detectorName, useDetectors, useRunAlerts, type Alert, type Detector } from '../../api/alerts';
import type { RunDetail } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { formatDate } from '../../lib/format';
import '../../components/alerts.css';

const DELIVERY_LABEL: Record<Exclude<Alert['delivery'], 'none'>, string> = {
  pending: 'delivery pending',
  delivered: 'delivered',
  failed: 'delivery failed',
};

function Delivery({ alert }: { alert: Alert }) {
  if (alert.delivery === 'none') return null;
  // The last try says why it failed (or where it went): "webhook: 503 Service Unavailable".
  const last = alert.deliveries.at(-1);
  const title = last ? `${last.target}, attempt ${last.attempt}${last.error ? `: ${last.error}` : ''}` : undefined;
  return (
    <span className={`alert-delivery alert-delivery-${alert.delivery}`} data-delivery={alert.delivery} title={title}>
      {DELIVERY_LABEL[alert.delivery]}
    </span>
  );
}

function AlertItem({ alert, detectors }: { alert: Alert; detectors: ReadonlyMap<string, Detector> | undefined }) {
  const detector = detectorName(alert);
  return (
    <li className="alert-item" data-alert-id={alert.id}>
      <strong>{alert.name}</strong>
      {detector != null && (
        <span className="alert-tag" title={detectors?.get(detector)?.summary}>
          detector
        </span>
      )}{' '}
      <span className="alert-message">{alert.message}</span>{' '}
      <span className="muted">
        fired <time dateTime={alert.fired_at}>{formatDate(alert.fired_at)}</time>
        {alert.resolved_at && (
          <>
            , resolved <time dateTime={alert.resolved_at}>{formatDate(alert.resolved_at)}</time>
          </>
        )}
      </span>{' '}
      <Delivery alert={alert} />
    </li>
  );
}

function Resolved({ alerts, detectors }: { alerts: Alert[]; detectors: ReadonlyMap<string, Detector> | undefined }) {
  const [open, setOpen] = useState(false);
  const listId = useId();
  return (
    <div className="resolved-alerts">
      <button type="button" className="linklike" aria-expanded={open} aria-controls={listId} onClick={() => setOpen(!open)}>
        {alerts.length} resolved alert{alerts.length === 1 ? '' : 's'}
      </button>
      {open && (
        <ul id={listId}>
          {alerts.map((a) => (
            <AlertItem key={a.id} alert={a} detectors={detectors} />
          ))}
        </ul>
      )}
    </div>
  );
}

/** What rules and detectors found on this run: open alerts as a banner, resolved ones folded away. */
export function RunAlerts({ run }: { run: RunDetail }) {
  const alerts = useRunAlerts(run);
  const items = alerts.data ?? [];
  const detectors = useDetectors(items.some((a) => detectorName(a) != null));
  if (alerts.error) return <ErrorNote error={alerts.error} />;
  const open = items.filter((a) => a.state === 'open');
  const resolved = items.filter((a) => a.state === 'resolved');
  if (!open.length && !resolved.length) return null;
  return (
    <section className="run-alerts" aria-label="Alerts">
      {open.length > 0 && (
        <div className="alert-banner" role="alert">
          <p className="alert-banner-title">
            {open.length} open alert{open.length === 1 ? '' : 's'}
          </p>
          <ul>
            {open.map((a) => (
              <AlertItem key={a.id} alert={a} detectors={detectors.data} />
            ))}
          </ul>
        </div>
      )}
      {resolved.length > 0 && <Resolved alerts={resolved} detectors={detectors.data} />}
    </section>
  );
}
