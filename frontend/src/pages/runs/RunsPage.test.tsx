import { describe, expect, it, vi, afterEach } from 'vitest';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes, useLocation } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { RunsPage } from './RunsPage';
import { parseFilters, toParams } from './filters';

type Headline = { key: string; step: number; value: number | string } | null;
const run = (id: number, status: string, name: string, algorithm = 'sft', headline: Headline = null) => ({
  id, name, status, project: 'default', algorithm, backend: 'fake', queue: 'default', priority: 50, preempted_by: null, status_reason: '',
  archived: false, total_steps: 100, last_step: 40, created_by: 'admin', created_at: '2025-01-01T00:00:00Z',
  updated_at: '2025-01-01T00:00:00Z', started_at: '2025-01-01T00:00:00Z', ended_at: '2025-01-01T00:10:00Z',
  failure: null, resumable: false, headline,
  config: { model: `run:${id}@250`, lr: 0.0003, batch_size: 8 * id, steps: 100, backend: 'torch', precision: 'bf16' },
});
const headline = (key: string, value: number | string, step = 40) => ({ key, step, value });

function Where() {
  const loc = useLocation();
  return <output data-testid="where">{loc.pathname + loc.search}</output>;
}

function json(body: unknown) {
  return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } });
}

/** The page as the app mounts it, in a router and a fresh query client that does not retry; `where` shows the URL. */
function renderRunsPage(entry = '/runs', { where = false } = {}) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  const page = where ? (
    <Routes>
      <Route path="/runs" element={<><RunsPage /><Where /></>} />
    </Routes>
  ) : (
    <RunsPage />
  );
  const view = render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[entry]}>{page}</MemoryRouter>
    </QueryClientProvider>,
  );
  return { client, view };
}

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('RunsPage', () => {
  it('renders a row per run, asks the API with the URL filters, and writes filter changes to the URL', async () => {
    const urls: string[] = [];
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      urls.push(req.url);
      const u = new URL(req.url);
      if (u.pathname === '/api/v1/runs') {
        const rows = [run(1, 'running', 'alpha', 'sft', headline('train/loss', 0.5)), run(2, 'failed', 'beta', 'sft', headline('eval/loss', 0.5))];
        return json({ data: rows, count: 2 });
      }
      if (u.pathname === '/api/v1/projects') return json({ data: [], count: 0 });
      return new Response('{}', { status: 404 });
    }));
    const { client } = renderRunsPage('/runs?algorithm=sft', { where: true });
    const table = await screen.findByRole('table');
    expect(within(table).getByRole('rowheader', { name: 'alpha' })).toBeTruthy();
    expect(within(table).getAllByRole('row')).toHaveLength(3); // header + 2 runs
    expect(within(table).getByText('running').dataset.status).toBe('running');
    expect(within(table).getAllByText('0.5')).toHaveLength(2);
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

  it('shows config columns the user picks, compactly, kept across visits', async () => {
    // An SDK run: the API sends null for what it does not have; its LR is float noise from a product.
    const sdkRun = { ...run(2, 'running', 'sdk', 'command'), config: { model: null, lr: 3 * 0.00001, batch_size: null } };
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      const u = new URL(req.url);
      if (u.pathname === '/api/v1/runs') return json({ data: [run(1, 'running', 'pref', 'dpo'), sdkRun], count: 2 });
      if (u.pathname === '/api/v1/projects') return json({ data: [], count: 0 });
      return new Response('{}', { status: 404 });
    }));
    const mount = () => {
      const { client, view } = renderRunsPage();
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
    expect(row.querySelector('[data-column="lr"]')?.textContent).toBe('3e-4');
    expect(row.querySelector('[data-column="model"]')?.textContent).toBe('run:1@250');
    expect(row.querySelector('[data-column="model"] [title]')?.getAttribute('title')).toBe('run:1@250'); // cut to one line, whole on hover
    const sdk = within(table).getAllByRole('row')[2]!;
    expect(['model', 'lr', 'batch_size'].map((c) => sdk.querySelector(`[data-column="${c}"]`)?.textContent)).toEqual(['—', '3e-5', '—']);

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

describe('RunsPage headlines', () => {
  it('shows each run\'s headline from the list answer, with no request per row, also after a poll', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true }); // Date too: TanStack times its polls against Date.now
    const paths: string[] = [];
    let polls = 0;
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      const u = new URL(req.url);
      paths.push(u.pathname);
      if (u.pathname === '/api/v1/projects') return json({ data: [], count: 0 });
      if (u.pathname !== '/api/v1/runs') return new Response('{}', { status: 404 });
      polls += 1;
      const rows = Array.from({ length: 30 }, (_, i) => run(i + 1, 'running', `r${i + 1}`, 'dpo', i === 29 ? null : headline('rewards/margin', i + polls / 10, 10 * polls)));
      rows[0] = run(1, 'running', 'r1', 'ppo', headline('reward/mean', 'NaN', 7));
      return json({ data: rows, count: rows.length });
    }));
    const { client } = renderRunsPage();
    const table = await screen.findByRole('table');
    const cell = (id: number) => table.querySelector(`tr[data-run-id="${id}"] td[data-column="headline"]`)!;
    expect(cell(2).textContent).toBe('rewards/margin 1.1');
    expect(cell(2).querySelector('[title]')?.getAttribute('title')).toBe('rewards/margin at step 10');
    expect(cell(1).textContent).toBe('reward/mean NaN');
    expect(cell(30).textContent).toBe('—');

    await vi.advanceTimersByTimeAsync(3_100); // the list's own poll brings new values
    await vi.waitFor(() => expect(cell(2).textContent).toBe('rewards/margin 1.2'));
    expect(new Set(paths)).toEqual(new Set(['/api/v1/runs', '/api/v1/projects', '/api/v1/alerts']));
    expect(paths.filter((p) => p === '/api/v1/runs')).toHaveLength(2);
    client.clear();
  });
});

describe('RunsPage decoding', () => {
  it("says how an accuracy headline's answers were drawn, and offers a Decoding column", async () => {
    const withDecoding = (r: ReturnType<typeof run>, decoding: string | null) => ({ ...r, config: { ...r.config, decoding } });
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      const u = new URL(req.url);
      if (u.pathname === '/api/v1/projects') return json({ data: [], count: 0 });
      if (u.pathname !== '/api/v1/runs') return new Response('{}', { status: 404 });
      const rows = [
        withDecoding(run(1, 'succeeded', 'in-run', 'eval', headline('eval/accuracy', 0.8)), 'greedy'),
        withDecoding(run(2, 'succeeded', 'sampled', 'eval', headline('eval/accuracy', 0.51)), 'sampled at T=1, 8 per prompt'),
        withDecoding(run(3, 'succeeded', 'rm', 'reward', headline('eval/accuracy', 0.9)), null),
        // An RL run's decoding is its held-out evaluations', not its training rollouts' reward/mean.
        withDecoding(run(4, 'running', 'rl', 'grpo', headline('reward/mean', 0.3)), 'greedy'),
      ];
      return json({ data: rows, count: rows.length });
    }));
    const { client } = renderRunsPage();
    const table = await screen.findByRole('table');
    const cell = (id: number, column: string) => table.querySelector(`tr[data-run-id="${id}"] td[data-column="${column}"]`)!;
    expect([1, 2, 3, 4].map((id) => cell(id, 'headline').textContent)).toEqual([
      'eval/accuracy 0.8 greedy', 'eval/accuracy 0.51 T=1 ×8', 'eval/accuracy 0.9', 'reward/mean 0.3',
    ]);
    expect(cell(2, 'headline').querySelector('.decoding')?.getAttribute('title')).toBe('answers drawn: sampled at T=1, 8 per prompt');
    expect(cell(3, 'headline').querySelector('.decoding')).toBeNull();

    fireEvent.click(screen.getByText(/^Columns/));
    fireEvent.click(screen.getByRole('checkbox', { name: 'Decoding' }));
    expect(within(table).getByRole('columnheader', { name: 'Decoding' })).toBeTruthy();
    expect([1, 2, 3].map((id) => cell(id, 'decoding').textContent)).toEqual(['greedy', 'sampled at T=1, 8 per prompt', '—']);
    client.clear();
  });
});

describe('RunsPage alerts', () => {
  const openAlert = (id: number, runId: number, name: string) => ({
    id, run_id: runId, run_name: `r${runId}`, project: 'default', rule_id: null, source: `detector:${name}`, name,
    message: '...', state: 'open', fired_at: '2025-01-01T00:05:00Z', resolved_at: null, delivery: 'none', deliveries: [],
  });

  it('marks only the runs with open alerts, with their count and names, from one request per refresh', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true }); // Date too: TanStack times its polls against Date.now
    const alertUrls: URL[] = [];
    let listPolls = 0;
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      const u = new URL(req.url);
      if (u.pathname === '/api/v1/projects') return json({ data: [], count: 0 });
      if (u.pathname === '/api/v1/runs') {
        listPolls += 1;
        return json({ data: Array.from({ length: 20 }, (_, i) => run(i + 1, 'running', `r${i + 1}`, 'grpo')), count: 20 });
      }
      if (u.pathname !== '/api/v1/alerts') return new Response('{}', { status: 404 });
      alertUrls.push(u);
      const items = [openAlert(2, 3, 'zero_std_groups'), openAlert(1, 3, 'loss spike')];
      // The second refresh brings one more, on another run.
      if (alertUrls.length > 1) items.unshift(openAlert(3, 5, 'length collapse'));
      return json({ items });
    }));
    const { client } = renderRunsPage();
    const table = await screen.findByRole('table');
    const marker = await within(table).findByRole('link', { name: '2 open alerts: zero_std_groups, loss spike' });
    expect(marker.closest('tr')?.dataset.runId).toBe('3');
    expect(marker.textContent).toBe('⚠ 2');
    expect(marker.getAttribute('title')).toBe('2 open alerts: zero_std_groups, loss spike');
    expect(marker.getAttribute('href')).toBe('/runs/3');
    expect(within(table).getAllByTestId('alert-marker')).toHaveLength(1);
    expect(alertUrls).toHaveLength(1);
    expect(Object.fromEntries(alertUrls[0]!.searchParams)).toEqual({ state: 'open', limit: '1000' });

    await vi.advanceTimersByTimeAsync(3_100); // the list's poll and the markers' come together
    await vi.waitFor(() => expect(within(table).getAllByTestId('alert-marker')).toHaveLength(2));
    expect(within(table).getByRole('link', { name: '1 open alert: length collapse' }).closest('tr')?.dataset.runId).toBe('5');
    expect(listPolls).toBe(2);
    expect(alertUrls).toHaveLength(2);
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

describe('the algorithm filter', () => {
  it('offers command (a user script) and asks the API for those runs', async () => {
    const urls: string[] = [];
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      urls.push(req.url);
      const u = new URL(req.url);
      if (u.pathname === '/api/v1/runs') return json({ data: [run(3, 'running', 'trl-sft', 'command')], count: 1 });
      if (u.pathname === '/api/v1/projects') return json({ data: [], count: 0 });
      return new Response('{}', { status: 404 });
    }));
    const { client } = renderRunsPage('/runs', { where: true });
    await screen.findByRole('table');
    const algorithms = screen.getByRole('group', { name: 'Algorithm' });
    expect(within(algorithms).getAllByRole('checkbox').map((c) => c.parentElement?.textContent)).toContain('command');
    fireEvent.click(within(algorithms).getByRole('checkbox', { name: 'command' }));
    expect(screen.getByTestId('where').textContent).toBe('/runs?algorithm=command');
    await vi.waitFor(() => expect(urls.some((u) => new URL(u).searchParams.get('algorithm') === 'command')).toBe(true));
    expect(parseFilters(new URLSearchParams('algorithm=command')).algorithm).toEqual(['command']);
    client.clear();
  });
});
