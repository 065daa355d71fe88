import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes, useLocation } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { SweepSummary } from '../../api/sweeps';
import { json } from '../../test/fixtures';
import { SweepsPage } from './SweepsPage';

const summary = (id: number, name: string, over: Partial<SweepSummary> = {}): SweepSummary => ({
  id, name, project: 'default', status: 'running', method: 'tpe', metric: 'eval/loss', goal: 'min', trials: 3, budget: 12,
  best_value: null, created_at: '2025-01-01T00:00:00Z', updated_at: '2025-01-01T01:00:00Z', ...over,
});

const ITEMS = [
  summary(9, 'sft-lr', { trials: 5, budget: 12, best_value: 0.42 }),
  summary(2, 'dpo-beta', { status: 'succeeded', method: 'grid', metric: 'eval/reward_acc', goal: 'max', trials: 4, budget: 4, best_value: 'NaN', project: 'alignment' }),
];

/** Stubs fetch; authFetch passes a relative path, the typed client a Request: both become URLs here. */
function stubApi(items: SweepSummary[]): URL[] {
  const urls: URL[] = [];
  vi.stubGlobal('fetch', vi.fn(async (input: RequestInfo) => {
    const url = new URL(input instanceof Request ? input.url : String(input), 'http://localhost');
    urls.push(url);
    if (url.pathname === '/api/v1/sweeps') return json({ items });
    if (url.pathname === '/api/v1/projects') return json({ data: [{ id: 1, name: 'default' }, { id: 2, name: 'alignment' }], count: 2 });
    return json({ detail: 'Not Found' }, 404);
  }));
  return urls;
}

function Where() {
  const loc = useLocation();
  return <output data-testid="where">{loc.pathname + loc.search}</output>;
}

function renderAt(url: string) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[url]}>
        <Routes>
          <Route path="/sweeps" element={<><SweepsPage /><Where /></>} />
          <Route path="*" element={<Where />} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('SweepsPage', () => {
  it('lists sweeps with status, method, metric and goal, trials of the budget and the best value, each row linking to its page', async () => {
    const urls = stubApi(ITEMS);
    const client = renderAt('/sweeps');
    const table = await screen.findByRole('table');
    const rows = within(table).getAllByRole('row').slice(1);
    expect(rows.map((r) => r.dataset.sweepId)).toEqual(['9', '2']);

    const [first, second] = [rows[0]!, rows[1]!];
    expect(within(first).getByRole('rowheader').textContent).toBe('sft-lr');
    expect(within(first).getByText('running').dataset.status).toBe('running');
    expect(within(second).getByText('succeeded').dataset.status).toBe('succeeded');
    expect(within(first).getByText('tpe')).toBeTruthy();
    expect(within(second).getByText('grid')).toBeTruthy();
    expect(within(second).getByText('alignment')).toBeTruthy();
    expect(within(first).getByTestId('sweep-metric').textContent).toBe('eval/loss (min)');
    expect(within(second).getByTestId('sweep-metric').textContent).toBe('eval/reward_acc (max)');
    expect(within(first).getByTestId('sweep-trials').textContent).toBe('5/12');
    expect(within(first).getByTestId('sweep-best').textContent).toBe('0.42');
    expect(within(second).getByTestId('sweep-best').textContent).toBe('NaN');
    expect(within(first).getByRole('link', { name: 'sft-lr' }).getAttribute('href')).toBe('/sweeps/9');
    expect(within(second).getByRole('link', { name: '2' }).getAttribute('href')).toBe('/sweeps/2');

    const asked = urls.find((u) => u.pathname === '/api/v1/sweeps')!;
    expect(asked.searchParams.get('project')).toBeNull();
    expect(asked.searchParams.get('limit')).toBe('100');

    fireEvent.click(within(first).getByRole('link', { name: 'sft-lr' }));
    expect(screen.getByTestId('where').textContent).toBe('/sweeps/9');
    client.clear();
  });

  it('shows no best value before a trial has one, and asks for the project in the URL', async () => {
    const urls = stubApi([summary(1, 'fresh', { trials: 0 })]);
    const client = renderAt('/sweeps?project=alignment');
    const row = (await screen.findAllByRole('row'))[1]!;
    expect(within(row).getByTestId('sweep-best').textContent).toBe('—');
    expect(within(row).getByTestId('sweep-trials').textContent).toBe('0/12');
    expect(urls.filter((u) => u.pathname === '/api/v1/sweeps').map((u) => u.searchParams.get('project'))).toEqual(['alignment']);
    client.clear();
  });

  it('says how to start one when there are none', async () => {
    stubApi([]);
    const client = renderAt('/sweeps');
    expect((await screen.findByText(/No sweeps yet\./)).textContent).toContain('rlplane sweep sweep.yaml');
    client.clear();
  });

  it('polls the list every 5 s', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true }); // Date too: TanStack times its polls against Date.now
    const urls = stubApi(ITEMS);
    const client = renderAt('/sweeps');
    await screen.findByRole('table');
    const lists = () => urls.filter((u) => u.pathname === '/api/v1/sweeps').length;
    expect(lists()).toBe(1);
    await vi.advanceTimersByTimeAsync(4_800);
    expect(lists()).toBe(1);
    await vi.advanceTimersByTimeAsync(300);
    expect(lists()).toBe(2);
    client.clear();
  });
});
