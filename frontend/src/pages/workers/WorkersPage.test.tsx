import { afterEach, describe, expect, it, vi } from 'vitest';
import { render, screen, within } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { WorkersPage } from './WorkersPage';

const worker = (over: object) => ({
  name: 'w', hostname: 'host', address: '10.0.0.9', queues: ['cpu'], capacity: 1, gpus: [], current_run_id: null, current_run_status: null,
  last_step: null, first_seen: '2025-01-01T00:00:00Z', last_heartbeat: '2025-01-01T00:00:00Z',
  seconds_since_heartbeat: 3, stale: false, ...over,
});

function stubWorkers(data: unknown[]) {
  vi.stubGlobal('fetch', vi.fn(async () =>
    new Response(JSON.stringify({ data, count: data.length }), { status: 200, headers: { 'Content-Type': 'application/json' } }),
  ));
}

function renderPage() {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <MemoryRouter>
        <WorkersPage />
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

afterEach(() => vi.unstubAllGlobals());

describe('WorkersPage', () => {
  it('lists workers, summarises queues and flags stale workers in words', async () => {
    stubWorkers([
      worker({
        name: 'gpu-box', hostname: 'node1', queues: ['gpu'], capacity: 2, current_run_id: 42, current_run_status: 'running', last_step: 17,
        gpus: [{ index: 0, name: 'H100', memory_total_mb: 81920, memory_used_mb: 40960, utilization: 87 }],
        seconds_since_heartbeat: 12,
      }),
      worker({ name: 'old', queues: ['cpu'], stale: true, seconds_since_heartbeat: 600 }),
    ]);
    const client = renderPage();
    expect(screen.getByRole('heading', { level: 1, name: 'Workers' })).toBeTruthy();
    const row = (await screen.findByText('gpu-box')).closest('tr')!;
    expect(row.dataset.worker).toBe('gpu-box');
    expect(within(row).getByRole('link', { name: '#42' }).getAttribute('href')).toBe('/runs/42');
    expect(within(row).getByText('step 17')).toBeTruthy();
    expect(within(row).getByText('12 s ago')).toBeTruthy();
    expect(within(row).getByText('1 × H100')).toBeTruthy();
    expect(within(row).getByRole('meter', { name: 'GPU 0 utilisation' }).getAttribute('aria-valuenow')).toBe('87');

    const stale = document.querySelector<HTMLElement>('[data-worker="old"]')!;
    expect(stale.className).toBe('stale');
    expect(within(stale).getByText('stale')).toBeTruthy();
    expect(within(row).queryByText('stale')).toBeNull();

    const gpuQueue = document.querySelector('[data-queue="gpu"]')!;
    expect([...gpuQueue.querySelectorAll('td')].map((td) => td.textContent)).toEqual(['1', '1', '0', '0', '1']);
    const cpuQueue = document.querySelector('[data-queue="cpu"]')!;
    expect([...cpuQueue.querySelectorAll('td')].map((td) => td.textContent)).toEqual(['1', '0', '0', '1', '0']);
    client.clear();
  });

  it('lists live workers before stale ones, each stale one greyed with its badge and time since its heartbeat', async () => {
    stubWorkers([
      worker({ name: 'dead-a', stale: true, seconds_since_heartbeat: 900 }),
      worker({ name: 'live-a' }),
      worker({ name: 'dead-b', stale: true, seconds_since_heartbeat: 7200 }),
      worker({ name: 'live-b' }),
    ]);
    const client = renderPage();
    await screen.findByText('live-b');
    const rows = [...document.querySelectorAll<HTMLElement>('table.workers tbody tr')];
    expect(rows.map((r) => [r.dataset.worker, r.className])).toEqual([
      ['live-a', ''], ['live-b', ''], ['dead-a', 'stale'], ['dead-b', 'stale'],
    ]);
    expect(within(rows[2]!).getByText('stale')).toBeTruthy();
    expect(within(rows[2]!).getByText('15 min ago')).toBeTruthy();
    expect(within(rows[3]!).getByText('2 h ago')).toBeTruthy();
    client.clear();
  });

  it('shows each worker\'s address and, for a gang\'s node, its place and the run it works on', async () => {
    const gang = (node_rank: number) => ({ run_id: 42, attempt: 1, node_rank, nodes: 2, workers: ['a', 'b'] });
    stubWorkers([
      worker({ name: 'a', address: '10.0.0.1', current_run_id: 42, current_run_status: 'running', last_step: 5, gang: gang(0) }),
      worker({ name: 'b', address: '10.0.0.2', current_run_id: 42, current_run_status: 'running', last_step: 5, gang: gang(1) }),
      worker({ name: 'solo', address: 'solo.local', current_run_id: 9, current_run_status: 'running', gang: null }),
    ]);
    const client = renderPage();
    await screen.findByText('solo');
    const row = (name: string) => document.querySelector<HTMLElement>(`[data-worker="${name}"]`)!;

    expect(within(row('a')).getByText('10.0.0.1')).toBeTruthy();
    expect(within(row('b')).getByText('10.0.0.2')).toBeTruthy();
    expect(within(row('solo')).getByText('solo.local')).toBeTruthy();

    const place = row('b').querySelector('.gang-place')!;
    expect(place.textContent).toBe('node 1 of 2 in run #42');
    expect(within(row('b')).getByRole('link', { name: '#42' }).getAttribute('href')).toBe('/runs/42');
    expect(within(row('b')).getByText(/^gang:/).textContent).toBe('gang: a, b');
    expect(row('a').querySelector('.gang-place')!.textContent).toBe('node 0 of 2 in run #42');
    expect(row('solo').querySelector('.gang-place')).toBeNull();
    expect(within(row('solo')).getByRole('link', { name: '#9' }).getAttribute('href')).toBe('/runs/9');
    client.clear();
  });

  it('explains how to start a worker when there are none', async () => {
    stubWorkers([]);
    const client = renderPage();
    expect(await screen.findByText('No workers have sent a heartbeat.')).toBeTruthy();
    expect(screen.getByText('rlplane worker --queues cpu --api URL --token TOKEN')).toBeTruthy();
    expect(document.querySelector('table')).toBeNull();
    client.clear();
  });
});
