import type { ReactElement } from 'react';
import { render } from '@testing-library/react';
import { MemoryRouter, Outlet, Route, Routes, useLocation } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { RunDetail } from '../api/types';
import type { RunContext } from '../pages/run/context';
import { RunEventBus } from '../sse/runEvents';

/** The router's current address, for assertions on navigation. */
export function Where() {
  const loc = useLocation();
  return <output data-testid="where">{loc.pathname + loc.search}</output>;
}

/** Renders a run page tab as RunPage would (its outlet context), with /new and others showing the URL. */
export function renderTab(tab: ReactElement, run: RunDetail, extra: Partial<RunContext> = {}) {
  const context = { run, bus: new RunEventBus(), metrics: null, ...extra } as unknown as RunContext;
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  const result = render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[`/runs/${run.id}/tab`]}>
        <Routes>
          <Route path="/runs/:id" element={<Outlet context={context} />}>
            <Route path="tab" element={tab} />
          </Route>
          <Route path="*" element={<Where />} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return { ...result, client, context };
}
