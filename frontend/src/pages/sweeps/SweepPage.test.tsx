import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { SweepDetail } from '../../api/sweeps';
import { json, sweepDetail, sweepTrial } from '../../test/fixtures';
import { SweepPage } from './SweepPage';

type Answer = (req: Request) => Response | Promise<Response>;

/** Stubs fetch with `answer`, keeping every request; authFetch passes a relative path, so it is made absolute here. */
function stubApi(answer: Answer): Request[] {
  const requests: Request[] = [];
  vi.stubGlobal('fetch', vi.fn(async (input: RequestInfo, init?: RequestInit) => {
    const req = input instanceof Request ? input : new Request(new URL(String(input), 'http://localhost'), init);
    requests.push(req.clone());
    return answer(req);
  }));
  return requests;
}

function renderPage(id = 4) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[`/sweeps/${id}`]}>
        <Routes>
          <Route path="/sweeps/:id" element={<SweepPage />} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

const gets = (requests: Request[]) => requests.filter((r) => r.method === 'GET').map((r) => new URL(r.url).pathname);
const PATHS = ['train.lr', 'train.batch_size', 'train.warmup_steps'];
const trialsTable = () => screen.getAllByRole('table').find((t) => t.classList.contains('trials'))!;
const trialRows = () => within(trialsTable()).getAllByRole('row').slice(1);
const trialOrder = () => trialRows().map((r) => r.dataset.trial);
const polylines = () => [...document.querySelectorAll<SVGPolylineElement>('.parcoords polyline')];

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('SweepPage', () => {
  it('shows the sweep\'s header and facts, and the best trial\'s values, value and run', async () => {
    const requests = stubApi(() => json(sweepDetail({ reason: 'best: trial 3 (run 23), eval/loss 0.42' })));
    const client = renderPage();
    await screen.findByRole('heading', { level: 1, name: '#4 sft-lr' });
    expect(gets(requests)).toEqual(['/api/v1/sweeps/4']);
    expect(screen.getByText('best: trial 3 (run 23), eval/loss 0.42')).toBeTruthy();
    const facts = document.querySelector('.sweep-facts')!.textContent!;
    expect(facts).toContain('tpe');
    expect(facts).toContain('eval/loss (min)');
    expect(facts).toContain('2 at once');
    expect(facts).toContain('stops weak trials: median from step 100');
    expect(screen.getByTestId('sweep-trials').textContent).toBe('5/12 trials');

    const best = screen.getByRole('region', { name: 'Best trial' });
    expect(within(best).getByText(/Trial 3/)).toBeTruthy();
    expect(within(best).getByTestId('best-value').textContent).toBe('0.42');
    expect(within(best).getByRole('link', { name: 'run #23' }).getAttribute('href')).toBe('/runs/23');
    const params = [...best.querySelectorAll<HTMLElement>('.best-params > div')].map((d) => `${d.dataset.path}=${d.querySelector('dd')!.textContent}`);
    expect(params).toEqual(['train.lr=0.0003162', 'train.batch_size=8', 'train.warmup_steps=50']);
    client.clear();
  });

  it('says how an accuracy metric\'s answers were drawn beside each trial\'s value and the best\'s', async () => {
    const trials = [
      sweepTrial(1, { 'train.lr': 0.0001 }, { value: 0.5, decoding: 'greedy' }),
      sweepTrial(2, { 'train.lr': 0.001 }, { value: 0.61, decoding: 'sampled at T=1, 8 per prompt' }),
    ];
    stubApi(() => json(sweepDetail({ metric: 'eval/accuracy', goal: 'max', trial_list: trials, best: trials[1]!, best_value: 0.61 })));
    const client = renderPage();
    const best = await screen.findByRole('region', { name: 'Best trial' });
    expect(best.textContent).toContain('0.61 T=1 ×8');
    const values = screen.getAllByTestId('trial-value').map((cell) => cell.textContent);
    expect(values).toEqual(expect.arrayContaining(['0.5 greedy', '0.61 T=1 ×8']));
    client.clear();
  });

  it('says there is no best trial before one has finished with a value', async () => {
    stubApi(() => json(sweepDetail({ best: null, best_value: null, trial_list: [sweepTrial(1, { 'train.lr': 0.0001 }, { state: 'running' })] })));
    const client = renderPage();
    const best = await screen.findByRole('region', { name: 'Best trial' });
    expect(best.textContent).toContain('None yet: the best is the trial with the lowest eval/loss');
    expect(within(best).queryByRole('link')).toBeNull();
    expect(screen.getByText(/No trial has a value yet/)).toBeTruthy();
    client.clear();
  });

  it('tables the trials with a column per searched path, their state, value, run and reason', async () => {
    stubApi(() => json(sweepDetail()));
    const client = renderPage();
    await screen.findByRole('heading', { level: 1 });
    const headers = [...trialsTable().querySelectorAll<HTMLElement>('thead th[data-path]')].map((th) => th.dataset.path);
    expect(headers).toEqual(PATHS);
    expect(trialOrder()).toEqual(['1', '2', '3', '4', '5']);

    const row = (n: number) => trialRows().find((r) => r.dataset.trial === String(n))!;
    const cells = (n: number) => PATHS.map((p) => row(n).querySelector(`td[data-path="${p}"]`)!.textContent);
    expect(cells(1)).toEqual(['0.0001', '16', '10']);
    expect(cells(3)).toEqual(['0.0003162', '8', '50']);
    expect(row(3).querySelector('td[data-path="train.lr"]')!.getAttribute('title')).toBe('0.00031622776601683794');
    expect(trialRows().map((r) => r.querySelector('[data-status]')!.textContent)).toEqual(['complete', 'failed', 'complete', 'pruned', 'running']);
    expect(trialRows().map((r) => within(r).getByTestId('trial-value').textContent)).toEqual(['0.9', '—', '0.42', '1.7', '—']);
    expect(within(row(2)).getByRole('link', { name: 'run #22' }).getAttribute('href')).toBe('/runs/22');
    expect(row(2).textContent).toContain('run #22 failed: CUDA out of memory');
    expect(row(4).textContent).toContain('stopped early at step 100');
    expect(row(3).dataset.best).toBe('true');
    expect(trialRows().filter((r) => r.dataset.best).length).toBe(1);
    client.clear();
  });

  it('sorts the trials by the metric, best first, then worst first; trials without a value stay last', async () => {
    stubApi(() => json(sweepDetail()));
    const client = renderPage();
    await screen.findByRole('heading', { level: 1 });
    const header = within(trialsTable()).getByRole('button', { name: /eval\/loss \(min\)/ });
    fireEvent.click(header);
    expect(trialOrder()).toEqual(['3', '1', '4', '2', '5']);
    expect(header.closest('th')!.getAttribute('aria-sort')).toBe('ascending');
    fireEvent.click(header);
    expect(trialOrder()).toEqual(['4', '1', '3', '2', '5']);
    expect(header.closest('th')!.getAttribute('aria-sort')).toBe('descending');
    fireEvent.click(within(trialsTable()).getByRole('button', { name: /Trial/ }));
    expect(trialOrder()).toEqual(['1', '2', '3', '4', '5']);
    client.clear();
  });

  it('puts the best first for a goal of max too, NaN after every number', async () => {
    const trials = [
      sweepTrial(1, { 'train.lr': 0.0001 }, { value: 0.6 }),
      sweepTrial(2, { 'train.lr': 0.001 }, { value: 'NaN' }),
      sweepTrial(3, { 'train.lr': 0.0003 }, { value: 0.8 }),
    ];
    stubApi(() => json(sweepDetail({ goal: 'max', metric: 'eval/acc', space: { 'train.lr': { type: 'float', low: 1e-5, high: 1e-3, log: true } }, best: trials[2]!, trial_list: trials })));
    const client = renderPage();
    await screen.findByRole('heading', { level: 1 });
    fireEvent.click(within(trialsTable()).getByRole('button', { name: /eval\/acc \(max\)/ }));
    expect(trialOrder()).toEqual(['3', '1', '2']);
    client.clear();
  });

  it('draws a parallel-coordinates SVG: an axis per searched path and the metric, a line per trial with a value, the best marked', async () => {
    stubApi(() => json(sweepDetail()));
    const client = renderPage();
    await screen.findByRole('heading', { level: 1 });
    const svg = screen.getByRole('img', { name: /Trials across/ });
    expect([...svg.querySelectorAll<SVGGElement>('g[data-path]')].map((g) => g.dataset.path)).toEqual([...PATHS, 'eval/loss']);

    // Trials 1, 3 and 4 have values; 2 failed without one and 5 still runs. The best is drawn last, on top.
    const lines = polylines();
    expect(lines.map((l) => l.dataset.trial).sort()).toEqual(['1', '3', '4']);
    expect(lines.filter((l) => l.dataset.best).map((l) => l.dataset.trial)).toEqual(['3']);
    expect(lines.at(-1)!.dataset.best).toBe('true');
    expect(lines.filter((l) => l.dataset.faint).map((l) => l.dataset.trial)).toEqual(['4']);
    for (const line of lines) expect(line.getAttribute('points')!.split(' ')).toHaveLength(4);
    expect(lines.find((l) => l.dataset.trial === '3')!.querySelector('title')!.textContent).toContain('Trial 3, best: eval/loss 0.42');
    // Coloured from best to worst: the best and the worst differ.
    const stroke = (n: string) => lines.find((l) => l.dataset.trial === n)!.getAttribute('stroke');
    expect(stroke('3')).not.toBe(stroke('4'));
    expect(screen.getByText(/3 trials with a value, 1 stopped early or failed \(faint\)/)).toBeTruthy();
    client.clear();
  });

  it('cancels a running sweep only after a confirmation, with POST /sweeps/{id}/cancel', async () => {
    const requests = stubApi((req) => (req.method === 'POST' ? json(sweepDetail({ status: 'cancelled', reason: 'cancelled by admin' })) : json(sweepDetail())));
    const client = renderPage();
    fireEvent.click(await screen.findByRole('button', { name: 'Cancel sweep' }));
    const dialog = screen.getByRole('dialog', { name: 'Cancel sweep #4?' });
    expect(dialog.textContent).toContain('the running trial stops');
    fireEvent.click(within(dialog).getByRole('button', { name: 'Keep it' }));
    expect(requests.filter((r) => r.method === 'POST')).toEqual([]);

    fireEvent.click(screen.getByRole('button', { name: 'Cancel sweep' }));
    fireEvent.click(within(screen.getByRole('dialog')).getByRole('button', { name: 'Cancel sweep' }));
    await waitFor(() => expect(screen.queryByRole('dialog')).toBeNull());
    expect(requests.filter((r) => r.method === 'POST').map((r) => new URL(r.url).pathname)).toEqual(['/api/v1/sweeps/4/cancel']);
    expect(screen.queryByRole('button', { name: 'Cancel sweep' })).toBeNull();
    expect(screen.getByText('cancelled by admin')).toBeTruthy();
    expect(gets(requests)).toEqual(['/api/v1/sweeps/4']); // the answer was the new state: no refetch needed
    client.clear();
  });

  it('shows the API\'s words when the cancel is refused', async () => {
    stubApi((req) => (req.method === 'POST' ? json({ detail: 'sweep 4 is succeeded; only a running sweep can be cancelled' }, 409) : json(sweepDetail())));
    const client = renderPage();
    fireEvent.click(await screen.findByRole('button', { name: 'Cancel sweep' }));
    fireEvent.click(within(screen.getByRole('dialog')).getByRole('button', { name: 'Cancel sweep' }));
    expect((await within(screen.getByRole('dialog')).findByRole('alert')).textContent).toBe('409: sweep 4 is succeeded; only a running sweep can be cancelled');
    client.clear();
  });

  it('polls every 3 s while the sweep runs, and stops once it has ended', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true }); // Date too: TanStack times its polls against Date.now
    const ended = sweepDetail({ status: 'succeeded' });
    ended.trial_list = ended.trial_list.map((t) => ({ ...t, state: t.state === 'running' ? 'complete' : t.state }));
    const answers: SweepDetail[] = [sweepDetail(), sweepDetail({ trials: 6 }), ended];
    const requests = stubApi(() => json(answers[Math.min(gets(requests).length - 1, answers.length - 1)]));
    const client = renderPage();
    await screen.findByRole('heading', { level: 1 });
    // Counted, not waited for: vi.waitFor moves fake clocks on by itself, which would hide a slower poll.
    await vi.advanceTimersByTimeAsync(2_800);
    expect(gets(requests)).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(300);
    expect(gets(requests)).toHaveLength(2);
    await vi.waitFor(() => expect(screen.getByTestId('sweep-trials').textContent).toBe('6/12 trials'));
    await vi.advanceTimersByTimeAsync(3_000);
    expect(gets(requests)).toHaveLength(3);
    await vi.waitFor(() => expect(screen.queryByRole('button', { name: 'Cancel sweep' })).toBeNull());
    await vi.advanceTimersByTimeAsync(10_000);
    expect(gets(requests)).toHaveLength(3);
    client.clear();
  });

  it('keeps polling a cancelled sweep until its trials have stopped running', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true });
    const stopping = sweepDetail({ status: 'cancelled' });
    if (!stopping.trial_list.some((t) => t.state === 'running')) throw new Error('the fixture needs a running trial');
    const requests = stubApi(() => json(stopping));
    const client = renderPage();
    await screen.findByRole('heading', { level: 1 });
    await vi.advanceTimersByTimeAsync(3_100);
    expect(gets(requests)).toHaveLength(2);
    client.clear();
  });

  it('says so for an id that is not one', () => {
    stubApi(() => json(sweepDetail()));
    renderPage(0);
    expect(screen.getByRole('alert').textContent).toBe('“0” is not a sweep id.');
  });
});
