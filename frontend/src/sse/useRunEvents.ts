import { useEffect, useMemo, useState } from 'react';
import { RunEventBus } from './runEvents';
import { openEventStream } from './connect';

/** One SSE connection per open run page; tabs subscribe through the returned bus. */
export function useRunEvents(runId: number): { bus: RunEventBus; connected: boolean } {
  const bus = useMemo(() => new RunEventBus(), [runId]);
  const [connected, setConnected] = useState(false);
  useEffect(() => {
    let deleted = false;
    const stop = openEventStream({
      url: `/api/v1/runs/${runId}/events`,
      onEvent: (event) => {
        if (event.event === 'deleted') deleted = true;
        bus.emit(event);
      },
      onState: setConnected,
      shouldReconnect: () => !deleted,
    });
    return () => {
      stop();
      setConnected(false);
    };
  }, [bus, runId]);
  return { bus, connected };
}
