import { describe, expect, it, vi, afterEach } from 'vitest';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes, useLocation } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { RunsPage } from './RunsPage';
import { parseFilters, toParams } from './filters';
import { pickHeadline } from './LatestMetric';

const run = (id: number, status: string, name: string, algorithm = 'sft') => ({
  id, name, status, project: 'default', algorithm, backend: 'fake', queue: 'default', status_reason: '',
  archived: false, total_steps: 100, last_step: 40, created_by: 'admin', created_at: '2025-01-01T00:00:00Z',
  updated_at: '2025-01-01T00:00:00Z', started_at: '2025-01-01T00:00:00Z', ended_at: '2025-01-01T00:10:00Z',
  failure: null, resumable: false,
  config: { model: `run:${id}@250`, lr: 0.0003, batch_size: 8 * id, steps: 100, backend: 'torch', precision: 'bf16' },
});
const key = (name: string, value: number) => ({ key: name, count: 3, last_step: 40, last_value: value, last_time: 1 });

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

  it('shows config columns the user picks, kept across visits, and each algorithm\'s headline metric', async () => {
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      const u = new URL(req.url);
      if (u.pathname === '/api/v1/runs') return json({ data: [run(1, 'running', 'pref', 'dpo')], count: 1 });
      if (u.pathname === '/api/v1/projects') return json({ data: [], count: 0 });
      if (u.pathname.endsWith('/metrics/keys')) {
        return json({ data: [key('rewards/chosen', -3), key('rewards/margin', 1.5), key('train/loss', 0.4)], count: 3 });
      }
      return new Response('{}', { status: 404 });
    }));
    const mount = () => {
      const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
      const view = render(
        <QueryClientProvider client={client}>
          <MemoryRouter initialEntries={['/runs']}>
            <RunsPage />
          </MemoryRouter>
        </QueryClientProvider>,
      );
      return () => {
        view.unmount();
        client.clear();
      };
    };
    let unmount = mount();
    const table = await screen.findByRole('table');
    const headers = () => within(table).getAllByRole('columnheader').map((h) => h.textContent?.trim());
    expect(headers()).toContain('LR');
    expect(headers()).not.toContain('Precision');
    const row = within(table).getAllByRole('row')[1]!;
    expect(row.querySelector('[data-column="lr"]')?.textContent).toBe('0.0003');
    expect(row.querySelector('[data-column="model"]')?.textContent).toBe('run:1@250');
    await vi.waitFor(() => expect(within(row).getByText('rewards/margin').parentElement?.textContent).toBe('rewards/margin 1.5'));

    fireEvent.click(screen.getByText(/^Columns/));
    fireEvent.click(screen.getByRole('checkbox', { name: 'Precision' }));
    fireEvent.click(screen.getByRole('checkbox', { name: 'LR' }));
    expect(headers()).toContain('Precision');
    expect(headers()).not.toContain('LR');
    unmount();
    unmount = mount();
    const again = await screen.findByRole('table');
    expect(within(again).getAllByRole('row')[1]!.querySelector('[data-column="precision"]')?.textContent).toBe('bf16');
    expect(within(again).queryByRole('columnheader', { name: 'LR' })).toBeNull();
    unmount();
  });
});

describe('pickHeadline', () => {
  const keys = (...names: string[]) => names.map((n) => key(n, 1));
  it.each([
    ['sft', ['train/loss', 'eval/loss'], 'eval/loss'],
    ['sft', ['train/loss', 'train/lr'], 'train/loss'],
    ['reward', ['train/loss', 'eval/accuracy', 'eval/loss'], 'eval/accuracy'],
    ['dpo', ['rewards/chosen', 'rewards/margin', 'train/loss'], 'rewards/margin'],
    ['dpo', ['rewards/chosen', 'rewards/margin', 'eval/loss'], 'eval/loss'],
    ['ppo', ['train/loss', 'ppo/kl', 'reward/mean'], 'reward/mean'],
    ['grpo', ['reward/mean', 'eval/accuracy'], 'reward/mean'],
    ['ilql', ['train/loss', 'eval/loss', 'eval/reward', 'eval/optimality'], 'eval/optimality'],
    ['ilql', ['train/loss', 'eval/loss'], 'train/loss'],
  ])('%s with %j shows %s', (algorithm, names, expected) => {
    expect(pickHeadline(keys(...names), algorithm)?.key).toBe(expected);
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
