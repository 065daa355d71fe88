import { useOutletContext } from 'react-router';
import type { RunDetail } from '../../api/types';
import type { MetricHistory } from '../../charts/useMetricHistory';
import type { RunEventBus } from '../../sse/runEvents';

/** What the run page hands its tabs: the run, its one live event stream and its metric history. */
export interface RunContext {
  run: RunDetail;
  bus: RunEventBus;
  metrics: MetricHistory;
}

export const useRunContext = () => useOutletContext<RunContext>();
