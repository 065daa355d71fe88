import { useEffect, useState } from 'react';
import { NavLink, Outlet, useParams } from 'react-router';
import { useQueryClient } from '@tanstack/react-query';
import { useRun } from '../../api/queries';
import { queryKeys } from '../../api/queryKeys';
import { isTerminal } from '../../api/runStatus';
import { useMetricHistory } from '../../charts/useMetricHistory';
import { ErrorNote } from '../../components/ErrorNote';
import { useRunEvents } from '../../sse/useRunEvents';
import type { RunContext } from './context';
import { RunAlerts } from './RunAlerts';
import { RunHeader } from './RunHeader';
import { SubmitWarnings } from './SubmitWarnings';
import { hasCodeTab } from './command';

const TABS = [
  ['', 'Charts'],
  ['samples', 'Samples'],
  ['logs', 'Logs'],
  ['checkpoints', 'Checkpoints'],
  ['spec', 'Spec'],
] as const;
// A command run (the user's own script) also shows what it ran and where.
const CODE_TAB = ['code', 'Code & environment'] as const;

export function RunPage() {
  const idParam = useParams().id;
  const runId = Number(idParam);
  const run = useRun(runId);
  const { bus, connected } = useRunEvents(runId);
  const metrics = useMetricHistory(runId, bus);
  const queryClient = useQueryClient();
  const [liveStep, setLiveStep] = useState<number | null>(null);

  useEffect(() => {
    const refresh = () => void queryClient.invalidateQueries({ queryKey: queryKeys.runs.detail(runId) });
    const offStatus = bus.on('status', refresh);
    const offDeleted = bus.on('deleted', refresh);
    const offMetrics = bus.on('metrics', (series) => {
      const top = series.reduce((m, s) => s.step.reduce((a, b) => Math.max(a, b), m), -1);
      setLiveStep((prev) => (prev == null || top > prev ? top : prev));
    });
    return () => {
      offStatus();
      offDeleted();
      offMetrics();
    };
  }, [bus, queryClient, runId]);

  if (!Number.isInteger(runId) || runId < 1) return <p role="alert">“{idParam}” is not a run id.</p>;
  if (run.error) return <ErrorNote error={run.error} />;
  if (!run.data) return <p className="muted">Loading run {runId}…</p>;

  const context: RunContext = { run: run.data, bus, metrics };
  const tabs = hasCodeTab(run.data) ? [...TABS, CODE_TAB] : TABS;
  return (
    <section className="run-page">
      {/* The stream stays open after a run ends but brings nothing more, so the live dot goes off; a queued
          run's dot stays on: its start comes through the stream. */}
      <RunHeader run={run.data} liveStep={liveStep} connected={connected && !isTerminal(run.data.status)} />
      <RunAlerts run={run.data} />
      <SubmitWarnings />
      <nav className="tabs" aria-label="Run sections">
        {tabs.map(([path, label]) => (
          <NavLink key={label} to={path ? `/runs/${runId}/${path}` : `/runs/${runId}`} end>
            {label}
          </NavLink>
        ))}
      </nav>
      <Outlet context={context} />
    </section>
  );
}
