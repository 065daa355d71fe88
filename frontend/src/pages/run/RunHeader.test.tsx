import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { AttemptNode, RunDetail } from '../../api/types';
import { commandRunDetail, json, runDetail } from '../../test/fixtures';
import { hostPort } from './Attempts';
import { RunHeader } from './RunHeader';

function renderHeader(run: RunDetail) {
  return render(
    <QueryClientProvider client={new QueryClient({ defaultOptions: { queries: { retry: false } } })}>
      <MemoryRouter>
        <RunHeader run={run} liveStep={null} connected={false} />
      </MemoryRouter>
    </QueryClientProvider>,
  );
}

afterEach(() => vi.unstubAllGlobals());

describe('RunHeader actions', () => {
  it('asks before cancelling, and only a confirmation sends the cancel', async () => {
    const posts: string[] = [];
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      posts.push(new URL(req.url).pathname);
      return json(runDetail({ status: 'cancelling' }));
    }));
    renderHeader(runDetail());
    fireEvent.click(screen.getByRole('button', { name: 'Cancel' }));
    const dialog = screen.getByRole('dialog', { name: 'Cancel run #7?' });
    expect(document.activeElement).toBe(within(dialog).getByRole('button', { name: 'Keep it' }));
    fireEvent.click(within(dialog).getByRole('button', { name: 'Keep it' }));
    expect(screen.queryByRole('dialog')).toBeNull();
    expect(posts).toEqual([]);

    fireEvent.click(screen.getByRole('button', { name: 'Cancel' }));
    fireEvent.click(within(screen.getByRole('dialog')).getByRole('button', { name: 'Cancel run' }));
    await waitFor(() => expect(posts).toEqual(['/api/v1/runs/7/cancel']));
    await waitFor(() => expect(screen.queryByRole('dialog')).toBeNull());
  });

  it('offers Resume only when the run is resumable, and says why not for a run that failed on its spec', () => {
    renderHeader(runDetail({ status: 'failed', failure: 'config', resumable: false }));
    expect(screen.queryByRole('button', { name: 'Resume' })).toBeNull();
    expect(screen.getByTestId('not-resumable').textContent).toContain('on its configuration');
    expect(screen.getByRole('link', { name: 'Clone' }).getAttribute('href')).toBe('/new?clone=7');
  });

  it('offers Resume for a cancelled run', () => {
    renderHeader(runDetail({ status: 'cancelled', resumable: true }));
    expect(screen.getByRole('button', { name: 'Resume' })).toBeTruthy();
    expect(screen.queryByRole('button', { name: 'Cancel' })).toBeNull();
  });

  it('offers Resume for a command run a worker ran', () => {
    renderHeader(commandRunDetail({}, { status: 'cancelled', resumable: true }));
    expect(screen.getByRole('button', { name: 'Resume' })).toBeTruthy();
    expect(screen.queryByText('started by its script')).toBeNull();
  });

  it('never offers Resume for a run its script started itself, says so, and marks it beside its status', () => {
    const external = { external: true, code: null, argv: ['train.py', '--lr', '3e-4'] };
    const { unmount } = renderHeader(commandRunDetail(external, { status: 'failed', failure: 'crashed', resumable: true }));
    expect(screen.queryByRole('button', { name: 'Resume' })).toBeNull();
    expect(screen.getByTestId('not-resumable').textContent).toContain('its script started it');
    const badge = screen.getByText('started by its script');
    expect(badge.previousElementSibling?.textContent).toBe('failed'); // beside the status badge
    expect(screen.getByRole('link', { name: 'Clone' })).toBeTruthy();
    unmount();

    renderHeader(commandRunDetail(external, { status: 'running' }));
    fireEvent.click(screen.getByRole('button', { name: 'Cancel' }));
    expect(screen.getByRole('dialog').textContent).toContain('cannot be resumed');
  });
});

describe('RunHeader attempts', () => {
  const started = '2025-01-01T00:00:00Z';
  const node = (node_rank: number, over: Partial<AttemptNode> = {}): AttemptNode => ({
    node_rank, role: 'trainer', worker: `w${node_rank}`, address: `10.0.0.${node_rank + 1}`,
    port: node_rank === 0 ? 29500 : null, state: 'joined', ended_at: null, end_reason: null, ...over,
  });

  it('lists a gang attempt\'s nodes in a table and keeps a one-node attempt a single row', () => {
    renderHeader(runDetail({
      attempts: [
        { number: 1, worker: 'solo', started_at: started, ended_at: started, end_reason: 'lost', last_step: 3, handed_back: false, nodes: [], gpu_seconds: 0, cpu_slot_seconds: 0 },
        {
          number: 2, worker: 'gang of 3', started_at: started, ended_at: null, end_reason: null, last_step: null, handed_back: false, gpu_seconds: 0, cpu_slot_seconds: 0,
          nodes: [
            node(0),
            node(1, { state: 'granted', address: null }),
            node(2, { role: 'generator', port: 31000, state: 'ended', end_reason: 'worker lost' }),
          ],
        },
      ],
    }));
    expect(screen.getByText('2 attempts')).toBeTruthy();
    expect(screen.getAllByRole('table', { name: /nodes/ })).toHaveLength(1);
    const nodes = screen.getByRole('table', { name: 'Attempt 2: 3 nodes' });
    expect(within(nodes).getAllByRole('columnheader').map((h) => h.textContent))
      .toEqual(['Node rank', 'Role', 'Worker', 'Address', 'State', 'End reason']);
    const cells = (rank: number) =>
      [...nodes.querySelector(`[data-node-rank="${rank}"]`)!.querySelectorAll('th, td')].map((c) => c.textContent);
    expect(cells(0)).toEqual(['0', 'trainer', 'w0', '10.0.0.1:29500', 'joined', '—']);
    expect(cells(1)).toEqual(['1', 'trainer', 'w1', '—', 'granted', '—']);
    expect(cells(2)).toEqual(['2', 'generator', 'w2', '10.0.0.3:31000', 'ended', 'worker lost']);
    expect(screen.getByRole('row', { name: /^2 gang of 3/ })).toBeTruthy();
    expect(screen.getByRole('row', { name: /^1 solo/ })).toBeTruthy();
  });

  it('shows the priority, the run it is being handed back for, and which run an attempt was preempted for', () => {
    renderHeader(runDetail({
      priority: 25, preempted_by: 12,
      attempts: [{
        number: 1, worker: 'w1', started_at: started, ended_at: started, last_step: 40, handed_back: true, nodes: [], gpu_seconds: 0, cpu_slot_seconds: 0,
        end_reason: 'handed back: preempted by run 9; checkpointed at step 40, where the next attempt resumes', preempted_by: 9,
      }],
    }));
    expect(screen.getByText(/priority 25 \(low\)/)).toBeTruthy();
    const preempting = screen.getByTestId('preempted-by');
    expect(within(preempting).getByRole('link', { name: '#12' }).getAttribute('href')).toBe('/runs/12');
    const attempt = screen.getByRole('row', { name: /^1 w1/ });
    expect(within(attempt).getByRole('link', { name: '#9' }).getAttribute('href')).toBe('/runs/9');
    expect(attempt.textContent).toContain('(#9 went first)');
  });

  it('lists a Slurm run\'s jobs with their state, reason and nodes', () => {
    renderHeader(runDetail({
      slurm_jobs: [
        { job_id: 7, state: 'COMPLETED', reason: null, node_list: 'n[1-2]', restarts: 0, output: '/jobs/run-1-attempt-1/slurm-7.out', submitted_at: started, ended_at: started },
        { job_id: 9, state: 'PENDING', reason: 'Resources', node_list: null, restarts: 1, output: '/jobs/run-1-attempt-2/slurm-9.out', submitted_at: started, ended_at: null },
      ],
    }));
    const jobs = screen.getByRole('table', { name: '2 Slurm jobs' });
    const cells = (job: number) =>
      [...jobs.querySelector(`[data-slurm-job="${job}"]`)!.querySelectorAll('th, td')].map((c) => c.textContent);
    expect(cells(7).slice(0, 4)).toEqual(['7', 'COMPLETED', '—', 'n[1-2]']);
    expect(cells(9).slice(0, 4)).toEqual(['9', 'PENDING (requeued 1×)', 'Resources', '—']);
    expect(cells(9)[5]).toBe('/jobs/run-1-attempt-2/slurm-9.out');
  });

  it('brackets an IPv6 rendezvous address before its port', () => {
    expect(hostPort('fd00::1', 29500)).toBe('[fd00::1]:29500');
    expect(hostPort('head.local', 29500)).toBe('head.local:29500');
    expect(hostPort('fd00::1', null)).toBe('fd00::1');
  });

  it('says why a queued run waits', () => {
    const reason = 'waiting for 4 workers on queue cpu: 3 idle of 3 serving it; runs behind it go first until enough workers serve the queue';
    renderHeader(runDetail({ status: 'queued', status_reason: reason }));
    expect(screen.getByText(reason)).toBeTruthy();
  });
});
