import type { ReactElement } from 'react';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { Alert } from '../../api/alerts';
import type { RunDetail } from '../../api/types';
import { alertOf, json, runDetail } from '../../test/fixtures';
import { RunAlerts } from './RunAlerts';
import { RunPage } from './RunPage';

type Answer = (url: URL) => Response | undefined;

/** Stubs fetch: `answer` first, then the run and its alerts; every request's URL is kept. */
function stubApi(run: RunDetail, alerts: Alert[], answer: Answer = () => undefined): URL[] {
  const urls: URL[] = [];
  vi.stubGlobal('fetch', vi.fn(async (input: RequestInfo, init?: RequestInit) => {
    // The typed client sends a Request; the event stream a relative path.
    const req = input instanceof Request ? input : new Request(new URL(String(input), 'http://localhost'), init);
    const url = new URL(req.url);
    urls.push(url);
    const answered = answer(url);
    if (answered) return answered;
    if (url.pathname === `/api/v1/runs/${run.id}`) return json(run);
    if (url.pathname === '/api/v1/alerts') return json({ items: alerts });
    return json({ detail: 'not here' }, 404);
  }));
  return urls;
}

const alertRequests = (urls: URL[]) => urls.filter((u) => u.pathname === '/api/v1/alerts');

function renderIn(path: string, element: ReactElement) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  const view = render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[path]}>
        <Routes>
          <Route path="/runs/:id" element={element} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return () => {
    view.unmount();
    client.clear();
  };
}

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('RunPage alerts', () => {
  it('shows the open alerts under the header as an alert, and folds the resolved ones behind a disclosure', async () => {
    const run = runDetail();
    const urls = stubApi(run, [
      alertOf({ id: 2, name: 'loss spike', message: 'train/loss 9.1 > 5 at step 40', delivery: 'delivered' }),
      alertOf({ id: 1, name: 'slow', message: 'under 1 step/s for 5 min', state: 'resolved', resolved_at: '2025-01-01T00:09:00Z' }),
    ]);
    const unmount = renderIn('/runs/7', <RunPage />);

    const banner = await screen.findByRole('alert');
    expect(banner.textContent).toContain('1 open alert');
    expect(within(banner).getByText('loss spike')).toBeTruthy();
    expect(within(banner).getByText('train/loss 9.1 > 5 at step 40')).toBeTruthy();
    expect(within(banner).getByText('delivered')).toBeTruthy();
    // Under the header, above the tabs.
    const header = document.querySelector<HTMLElement>('header.run-header')!;
    expect(header.compareDocumentPosition(banner) & Node.DOCUMENT_POSITION_FOLLOWING).toBeTruthy();
    expect(within(header).queryByRole('alert')).toBeNull();

    const disclosure = screen.getByRole('button', { name: '1 resolved alert' });
    expect(disclosure.getAttribute('aria-expanded')).toBe('false');
    expect(screen.queryByText('under 1 step/s for 5 min')).toBeNull();
    fireEvent.click(disclosure);
    expect(disclosure.getAttribute('aria-expanded')).toBe('true');
    const resolved = document.getElementById(disclosure.getAttribute('aria-controls')!)!;
    expect(within(resolved).getByText('slow')).toBeTruthy();
    expect(within(resolved).getByText('under 1 step/s for 5 min')).toBeTruthy();
    expect(within(banner).queryByText('slow')).toBeNull();

    expect(alertRequests(urls).map((u) => u.search)).toEqual(['?run_id=7']);
    unmount();
  });
});

describe('RunAlerts', () => {
  it('polls every 10 s while the run is active', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true }); // Date too: TanStack times its polls against Date.now
    let fired = false;
    const urls = stubApi(runDetail(), [], (url) =>
      url.pathname === '/api/v1/alerts' && fired ? json({ items: [alertOf({ name: 'reward collapse' })] }) : undefined,
    );
    const unmount = renderIn('/runs/7', <RunAlerts run={runDetail({ status: 'running' })} />);
    await vi.waitFor(() => expect(alertRequests(urls)).toHaveLength(1));
    expect(screen.queryByRole('alert')).toBeNull(); // nothing fired: nothing shown

    fired = true;
    await vi.advanceTimersByTimeAsync(10_100);
    expect(await screen.findByText('reward collapse')).toBeTruthy();
    expect(alertRequests(urls)).toHaveLength(2);
    unmount();
  });

  it('asks once for a run that ended long ago', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true });
    const run = runDetail({ status: 'succeeded', ended_at: '2025-01-01T00:10:00Z' });
    const urls = stubApi(run, [alertOf({ state: 'resolved', resolved_at: '2025-01-01T00:08:00Z' })]);
    const unmount = renderIn('/runs/7', <RunAlerts run={run} />);
    expect(await screen.findByRole('button', { name: '1 resolved alert' })).toBeTruthy();
    expect(screen.queryByRole('alert')).toBeNull();
    await vi.advanceTimersByTimeAsync(35_000);
    expect(alertRequests(urls)).toHaveLength(1);
    unmount();
  });

  it('tags a detector\'s alert with the detector\'s summary, asked for once, and says why a delivery failed', async () => {
    const summary = 'every group had the same reward for 5 steps: the run learns nothing';
    const urls = stubApi(
      runDetail(),
      [
        alertOf({
          source: 'detector:zero_std_groups', rule_id: null, name: 'zero_std_groups', message: 'grpo/zero_std_groups = 1 for 5 steps',
          delivery: 'failed', deliveries: [{ attempt: 3, at: '2025-01-01T00:06:00Z', target: 'webhook', ok: false, error: '503 Service Unavailable' }],
        }),
        alertOf({ name: 'loss spike' }),
      ],
      (url) => (url.pathname === '/api/v1/alert-detectors' ? json({ items: [{ name: 'zero_std_groups', algorithms: ['grpo'], summary }] }) : undefined),
    );
    const unmount = renderIn('/runs/7', <RunAlerts run={runDetail({ algorithm: 'grpo' })} />);
    const banner = await screen.findByRole('alert');
    const [detector, rule] = within(banner).getAllByRole('listitem');
    const tag = within(detector!).getByText('detector');
    await vi.waitFor(() => expect(tag.getAttribute('title')).toBe(summary));
    expect(within(rule!).queryByText('detector')).toBeNull();
    expect(within(detector!).getByText('delivery failed').getAttribute('title')).toBe('webhook, attempt 3: 503 Service Unavailable');
    expect(urls.filter((u) => u.pathname === '/api/v1/alert-detectors')).toHaveLength(1);
    unmount();
  });
});
