import { Link } from 'react-router';
import { isRetryable, type Stage } from '../../api/pipelines';
import { StatusBadge } from '../../components/StatusBadge';
import { MetricValue } from '../../components/Decoding';

function Headline({ headline }: { headline: Stage['headline'] }) {
  if (!headline) return <span className="muted">no metric yet</span>;
  return (
    <>
      <span className="muted">{headline.key}</span>{' '}
      <span className="num">
        <MetricValue metricKey={headline.key} value={headline.value} decoding={headline.decoding} />
      </span>
    </>
  );
}

/** The latest run, and the earlier ones a retry left behind: each is an ordinary run page. */
function StageRuns({ stage }: { stage: Stage }) {
  if (stage.run_id == null) return <span className="muted">no run yet</span>;
  const earlier = stage.runs.filter((id) => id !== stage.run_id);
  return (
    <span className="stage-runs">
      <Link to={`/runs/${stage.run_id}`} title={stage.run_status ? `run status: ${stage.run_status}` : undefined}>
        run #{stage.run_id}
      </Link>
      {earlier.length > 0 && (
        <span className="muted">
          {' '}
          (earlier{' '}
          {earlier.map((id, i) => (
            <span key={id}>
              {i > 0 && ', '}
              <Link to={`/runs/${id}`}>#{id}</Link>
            </span>
          ))}
          )
        </span>
      )}
    </span>
  );
}

interface Props {
  stage: Stage;
  style: { left: number; top: number; width: number; height: number };
  layer: number;
  retrying: boolean;
  onRetry: (stage: string) => void;
}

export function StageNode({ stage, style, layer, retrying, onRetry }: Props) {
  return (
    <li className="stage-node" style={style} data-stage={stage.name} data-status={stage.status} data-layer={layer} aria-label={`Stage ${stage.name}`}>
      <div className="stage-head">
        <h3>{stage.name}</h3>
        <StatusBadge status={stage.status} />
      </div>
      {stage.needs.length > 0 && <span className="sr-only">needs {stage.needs.join(', ')}</span>}
      <div className="stage-headline" data-testid="stage-headline">
        <Headline headline={stage.headline} />
      </div>
      {stage.when && (
        <div className="stage-gate" title={stage.when}>
          <span className="muted">when</span> <code>{stage.when}</code>
        </div>
      )}
      {stage.reason && (
        <p className="stage-reason" title={stage.reason} data-testid="stage-reason">
          {stage.reason}
        </p>
      )}
      <div className="stage-foot">
        <StageRuns stage={stage} />
        {isRetryable(stage.status) && (
          <button type="button" disabled={retrying} onClick={() => onRetry(stage.name)} aria-label={`Retry ${stage.name}`}>
            Retry
          </button>
        )}
      </div>
    </li>
  );
}
