import { useId } from 'react';
import type { SweepDetail } from '../../api/sweeps';
import { DecodingTag } from '../../components/Decoding';
import { formatNumber } from '../../lib/format';
import { TrialRun } from './TrialsTable';
import { formatParam } from './values';

/** The trial to take away: its values at every searched path, its metric value and its run. */
export function BestTrial({ sweep }: { sweep: Pick<SweepDetail, 'best' | 'metric' | 'goal'> }) {
  const { best } = sweep;
  const titleId = useId();
  return (
    <section className="best-trial" aria-labelledby={titleId}>
      <h2 id={titleId}>Best trial</h2>
      {!best ? (
        <p className="muted">None yet: the best is the trial with the {sweep.goal === 'min' ? 'lowest' : 'highest'} {sweep.metric} once its run has finished.</p>
      ) : (
        <>
          <p>
            Trial {best.number} · <span className="muted">{sweep.metric}</span>{' '}
            <span className="num" data-testid="best-value">
              {formatNumber(best.value)}
            </span>
            <DecodingTag metricKey={sweep.metric} decoding={best.decoding} />{' '}
            · <TrialRun trial={best} />
          </p>
          <dl className="best-params">
            {Object.entries(best.params).map(([path, value]) => (
              <div key={path} data-path={path}>
                <dt>
                  <code>{path}</code>
                </dt>
                <dd className="num" title={JSON.stringify(value)}>
                  {formatParam(value)}
                </dd>
              </div>
            ))}
          </dl>
        </>
      )}
    </section>
  );
}
