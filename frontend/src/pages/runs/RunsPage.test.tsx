import { describe, expect, it, vi, afterEach } from 'vitest';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes, useLocation } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { RunsPage } from './RunsPage';
import { parseFilters, toParams } from './filters';

const run = (id: number, status: string, name: string) => ({
  id, name, status, project: 'default', algorithm: 'sft', backend: 'fake', queue: 'default', status_reason: '',
  archived: false, total_steps: 100, last_step: 40, created_by: 'admin', created_at: '2025-01-01T00:00:00Z',
  updated_at: '2025-01-01T00:00:00Z', started_at: '2025-01-01T00:00:00Z', ended_at: '2025-01-01T00:10:00Z',
});

function Where() {
  const loc = useLocation();
  return <output data-testid="where">{loc.pathname + loc.search}</output>;
}

function json(body: unknown) {
  return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } });
}

afterEach(() => vi.unstubAllGlobals());

describe('RunsPage', () => {
  it('renders a row per run, asks the API with the URL filters, and writes filter changes to the URL', async () => {
    const urls: string[] = [];
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      urls.push(req.url);
      const u = new URL(req.url);
      if (u.pathname === '/api/v1/runs') return json({ data: [run(1, 'running', 'alpha'), run(2, 'failed', 'beta')], count: 2 });
      if (u.pathname === '/api/v1/projects') return json({ data: [], count: 0 });
      if (u.pathname.endsWith('/metrics/keys')) {
        return json({ data: [{ key: 'train/loss', count: 3, last_step: 40, last_value: 0.5, last_time: 1 }], count: 1 });
      }
      return new Response('{}', { status: 404 });
    }));
    const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
    render(
      <QueryClientProvider client={client}>
        <MemoryRouter initialEntries={['/runs?algorithm=sft']}>
          <Routes>
            <Route path="/runs" element={<><RunsPage /><Where /></>} />
          </Routes>
        </MemoryRouter>
      </QueryClientProvider>,
    );
    const table = await screen.findByRole('table');
    expect(within(table).getByRole('rowheader', { name: 'alpha' })).toBeTruthy();
    expect(within(table).getAllByRole('row')).toHaveLength(3); // header + 2 runs
    expect(within(table).getByText('running').dataset.status).toBe('running');
    await vi.waitFor(() => expect(within(table).getAllByText('0.5')).toHaveLength(2));
    expect(urls.some((u) => u.includes('/api/v1/runs?') && u.includes('algorithm=sft'))).toBe(true);

    fireEvent.click(screen.getByRole('checkbox', { name: 'failed' }));
    expect(screen.getByTestId('where').textContent).toBe('/runs?status=failed&algorithm=sft');
    fireEvent.change(screen.getByLabelText('Name'), { target: { value: 'alp' } });
    expect(screen.getByTestId('where').textContent).toBe('/runs?status=failed&algorithm=sft&q=alp');

    fireEvent.click(screen.getByRole('checkbox', { name: 'Select run 1' }));
    fireEvent.click(screen.getByRole('checkbox', { name: 'Select run 2' }));
    expect(screen.getByRole('link', { name: /Compare/ }).getAttribute('href')).toBe('/compare?runs=1,2');
    client.clear();
  });
});

describe('filters', () => {
  it('round-trips through the URL and drops values the API would reject', () => {
    const f = parseFilters(new URLSearchParams('status=running&status=bogus&sort=name&limit=9999&offset=-3'));
    expect(f.status).toEqual(['running']);
    expect(f.limit).toBe(500);
    expect(f.offset).toBe(0);
    expect(toParams(f).toString()).toBe('status=running&sort=name&limit=500');
  });
});
