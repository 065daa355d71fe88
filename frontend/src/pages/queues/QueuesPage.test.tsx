import { afterEach, describe, expect, it, vi } from 'vitest';
import { render, screen, within } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { QueuesPage } from './QueuesPage';

const queue = (over: object) => ({ name: 'cpu', workers: 0, idle: 0, gpus: 0, holding: [], waiting: [], ...over });

function stubQueues(data: unknown[]) {
  vi.stubGlobal('fetch', vi.fn(async () =>
    new Response(JSON.stringify({ data }), { status: 200, headers: { 'Content-Type': 'application/json' } }),
  ));
}

function renderPage() {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <MemoryRouter>
        <QueuesPage />
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

afterEach(() => vi.unstubAllGlobals());

describe('QueuesPage', () => {
  it('shows each queue\'s workers, what each project holds beside its quota, and who waits and why', async () => {
    stubQueues([
      queue({
        name: 'gpu', workers: 2, idle: 1, gpus: 16,
        holding: [
          { project: 'llm', slots: 8, runs: 2, max_gpus: 8, max_runs: 4 },
          { project: 'vision', slots: 1, runs: 1, max_gpus: null, max_runs: null },
        ],
        waiting: [
          { run_id: 42, name: 'grpo-big', project: 'llm', priority: 75, reason: "its project's quota: 8 of 8 slots held" },
          { run_id: null, name: null, project: 'secret', priority: 60, reason: '' },
        ],
      }),
      queue({ name: 'cpu', workers: 1, idle: 1 }),
    ]);
    const client = renderPage();
    expect(screen.getByRole('heading', { level: 1, name: 'Queues' })).toBeTruthy();

    const gpu = await screen.findByRole('region', { name: /^gpu/ });
    expect(within(gpu).getByRole('heading', { level: 2 }).textContent).toBe('gpu 2 workers (1 idle), 16 GPUs');
    const cpu = screen.getByRole('region', { name: /^cpu/ });
    expect(within(cpu).getByRole('heading', { level: 2 }).textContent).toBe('cpu 1 worker (1 idle), 0 GPUs');
    expect(within(cpu).getByText('No project holds any of it.')).toBeTruthy();
    expect(within(cpu).getByText('No run waits for it.')).toBeTruthy();

    const holding = within(gpu).getByRole('table', { name: 'Holding' });
    const llm = within(holding).getByRole('rowheader', { name: 'llm' }).closest('tr')!;
    expect([...llm.querySelectorAll('td')].map((td) => td.textContent)).toEqual(['8', '2', '8 slots, 4 runs']);
    const vision = within(holding).getByRole('rowheader', { name: 'vision' }).closest('tr')!;
    expect(vision.querySelectorAll('td')[2]!.textContent).toBe('—');

    const waiting = within(gpu).getByRole('table', { name: 'Waiting' });
    const rows = within(waiting).getAllByRole('row').slice(1);
    expect(within(rows[0]!).getByRole('link', { name: '#42 grpo-big' }).getAttribute('href')).toBe('/runs/42');
    expect([...rows[0]!.querySelectorAll('td')].map((td) => td.textContent)).toEqual([
      'llm', '75 (high)', "its project's quota: 8 of 8 slots held",
    ]);
    expect(within(rows[1]!).getByText('(not yours)')).toBeTruthy();
    expect(within(rows[1]!).queryByRole('link')).toBeNull();
    expect([...rows[1]!.querySelectorAll('td')].map((td) => td.textContent)).toEqual(['secret', '60', '—']);
    client.clear();
  });

  it('says how a queue comes to be when there are none', async () => {
    stubQueues([]);
    const client = renderPage();
    expect(await screen.findByText('No queue has a live worker or a queued or active run.')).toBeTruthy();
    expect(document.querySelector('table')).toBeNull();
    client.clear();
  });
});
