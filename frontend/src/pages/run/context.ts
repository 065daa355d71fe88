import { useOutletContext } from 'react-router';
import type { RunDetail } from '../../api/types';
import type { RunEventBus } from '../../sse/runEvents';

/** What the run page hands its tabs: the run and its one live event stream. */
export interface RunContext {
  run: RunDetail;
  bus: RunEventBus;
}

export const useRunContext = () => useOutletContext<RunContext>();
