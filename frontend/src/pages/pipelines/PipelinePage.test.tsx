import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { PipelineDetail } from '../../api/pipelines';
import { json, pipelineChain, pipelineStage } from '../../test/fixtures';
import { PipelinePage } from './PipelinePage';

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

function renderPage(id = 5) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[`/pipelines/${id}`]}>
        <Routes>
          <Route path="/pipelines/:id" element={<PipelinePage />} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

const node = (name: string) => screen.getByRole('listitem', { name: `Stage ${name}` });
const gets = (requests: Request[]) => requests.filter((r) => r.method === 'GET').map((r) => new URL(r.url).pathname);

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('PipelinePage', () => {
  it('lays sft -> rm -> ppo out by depth, with each stage\'s status, headline, gate, reason and runs', async () => {
    const requests = stubApi(() => json(pipelineChain()));
    const client = renderPage();
    await screen.findByRole('heading', { level: 1, name: '#5 rlhf' });
    expect(gets(requests)).toEqual(['/api/v1/pipelines/5']);
    expect(screen.getByText('stage rm failed')).toBeTruthy();

    const layers = ['sft', 'rm', 'ppo'].map((n) => node(n).dataset.layer);
    expect(layers).toEqual(['0', '1', '2']);
    const lefts = ['sft', 'rm', 'ppo'].map((n) => parseFloat(node(n).style.left));
    expect(lefts[0]).toBeLessThan(lefts[1]!);
    expect(lefts[1]).toBeLessThan(lefts[2]!);
    const edges = [...document.querySelectorAll('svg path[data-from]')].map((p) => `${p.getAttribute('data-from')}->${p.getAttribute('data-to')}`);
    expect(edges.sort()).toEqual(['rm->ppo', 'sft->ppo', 'sft->rm']);

    const badge = (name: string) => node(name).querySelector('.stage-head [data-status]')!;
    expect(['sft', 'rm', 'ppo'].map((n) => badge(n).textContent)).toEqual(['succeeded', 'failed', 'skipped']);

    expect(within(node('sft')).getByTestId('stage-headline').textContent).toBe('eval/loss 1.234');
    expect(within(node('rm')).getByTestId('stage-headline').textContent).toBe('train/loss —');
    expect(within(node('ppo')).getByTestId('stage-headline').textContent).toBe('no metric yet');

    expect(within(node('rm')).getByText('stages.sft.metrics["eval/loss"] < 1.5')).toBeTruthy();
    expect(within(node('sft')).queryByText('when')).toBeNull();
    expect(within(node('rm')).getByTestId('stage-reason').textContent).toBe('run #12 failed: CUDA out of memory');
    expect(within(node('ppo')).getByTestId('stage-reason').textContent).toBe('rm failed');
    expect(within(node('sft')).queryByTestId('stage-reason')).toBeNull();

    expect(within(node('sft')).getByRole('link', { name: 'run #11' }).getAttribute('href')).toBe('/runs/11');
    expect(within(node('rm')).getByRole('link', { name: 'run #12' }).getAttribute('href')).toBe('/runs/12');
    expect(within(node('rm')).getByRole('link', { name: '#9' }).getAttribute('href')).toBe('/runs/9'); // the try before the last
    expect(within(node('ppo')).queryByRole('link')).toBeNull();
    expect(within(node('ppo')).getByText('no run yet')).toBeTruthy();

    // Retry where the stage ended without success; Cancel only while the pipeline runs.
    expect(within(node('sft')).queryByRole('button')).toBeNull();
    expect(within(node('rm')).getByRole('button', { name: 'Retry rm' })).toBeTruthy();
    expect(within(node('ppo')).getByRole('button', { name: 'Retry ppo' })).toBeTruthy();
    expect(screen.queryByRole('button', { name: 'Cancel pipeline' })).toBeNull();
    client.clear();
  });

  it("says how an eval stage's accuracy was drawn beside its headline", async () => {
    const chain = pipelineChain({
      stages: [
        pipelineStage('sft', { status: 'succeeded', run_id: 11, runs: [11], headline: { key: 'eval/loss', value: 1.2, decoding: null } }),
        pipelineStage('eval', {
          status: 'succeeded', needs: ['sft'], run_id: 12, runs: [12],
          headline: { key: 'eval/accuracy', value: 0.51, decoding: 'sampled at T=1, 8 per prompt' },
        }),
      ],
    });
    stubApi(() => json(chain));
    const client = renderPage();
    await waitFor(() => expect(within(node('eval')).getByTestId('stage-headline').textContent).toBe('eval/accuracy 0.51 T=1 ×8'));
    expect(within(node('sft')).getByTestId('stage-headline').textContent).toBe('eval/loss 1.2');
    client.clear();
  });

  it("shows every gate and reason in full below the graph, with the value the gate compared", async () => {
    const gated = pipelineChain({
      stages: [
        pipelineStage('sft', { status: 'succeeded', run_id: 11, runs: [11] }),
        pipelineStage('rm', {
          status: 'succeeded', needs: ['sft'], run_id: 12, runs: [12], when: 'stages.sft.metrics["eval/loss"] < 1.5',
          gate: ['stages.sft.metrics["eval/loss"] < 1.5: it is 1.2, holds'], reason: null,
        }),
        pipelineStage('ppo', {
          status: 'skipped', needs: ['rm'], when: 'stages.rm.metrics["eval/accuracy"] > 0.7 and stages.sft.metrics["eval/loss"] < 1.5',
          gate: ['stages.rm.metrics["eval/accuracy"] > 0.7: it is 0.55, does not hold', 'stages.sft.metrics["eval/loss"] < 1.5: it is 1.2, holds'],
          reason: 'gate closed: stages.rm.metrics["eval/accuracy"] > 0.7: it is 0.55',
        }),
      ],
    });
    stubApi(() => json(gated));
    const client = renderPage();
    const details = await screen.findByRole('region', { name: 'Gates and reasons' });
    const rows = within(details).getAllByRole('row').slice(1).map((r) => [r.getAttribute('data-stage'), ...[...r.querySelectorAll('td')].map((td) => td.textContent)]);
    expect(rows).toEqual([
      ['rm', 'succeeded', 'stages.sft.metrics["eval/loss"] < 1.5: it is 1.2, holds', '—'],
      [
        'ppo', 'skipped',
        'stages.rm.metrics["eval/accuracy"] > 0.7: it is 0.55, does not holdstages.sft.metrics["eval/loss"] < 1.5: it is 1.2, holds',
        'gate closed: stages.rm.metrics["eval/accuracy"] > 0.7: it is 0.55',
      ],
    ]);
    // The boxes cut long text; hovering one shows it whole too.
    expect(within(node('ppo')).getByTestId('stage-reason').getAttribute('title')).toBe('gate closed: stages.rm.metrics["eval/accuracy"] > 0.7: it is 0.55');
    client.clear();
  });

  it('retries a stage with POST .../stages/{name}/retry and shows the API\'s message for a 409', async () => {
    const requests = stubApi((req) =>
      req.method === 'POST' ? json({ detail: 'stage rm cannot be retried while its run is cancelling' }, 409) : json(pipelineChain()),
    );
    const client = renderPage();
    fireEvent.click(await screen.findByRole('button', { name: 'Retry rm' }));
    const alert = await screen.findByRole('alert');
    expect(alert.textContent).toBe('Could not retry rm: stage rm cannot be retried while its run is cancelling');
    const post = requests.find((r) => r.method === 'POST')!;
    expect(new URL(post.url).pathname).toBe('/api/v1/pipelines/5/stages/rm/retry');
    expect(await post.json()).toEqual({});
    expect(post.headers.get('Content-Type')).toBe('application/json');
    client.clear();
  });

  it('shows a 422\'s field errors, and a successful retry\'s answer replaces the page at once', async () => {
    const afterRetry = pipelineChain({
      status: 'running',
      reason: null,
      stages: [
        pipelineChain().stages[0]!,
        pipelineStage('rm', { status: 'running', needs: ['sft'], run_id: 13, runs: [9, 12, 13] }),
        pipelineStage('ppo', { status: 'waiting', needs: ['sft', 'rm'] }),
      ],
    });
    const requests = stubApi((req) => {
      const path = new URL(req.url).pathname;
      if (path.endsWith('/stages/ppo/retry')) return json({ detail: [{ loc: ['body', 'spec', 'ppo', 'kl_coef'], msg: 'must be >= 0' }] }, 422);
      if (path.endsWith('/stages/rm/retry')) return json(afterRetry);
      return json(pipelineChain());
    });
    const client = renderPage();
    fireEvent.click(await screen.findByRole('button', { name: 'Retry ppo' }));
    expect((await screen.findByRole('alert')).textContent).toBe('Could not retry ppo: body.spec.ppo.kl_coef: must be >= 0');

    fireEvent.click(screen.getByRole('button', { name: 'Retry rm' }));
    await waitFor(() => expect(within(node('rm')).getByRole('link', { name: 'run #13' }).getAttribute('href')).toBe('/runs/13'));
    expect(screen.queryByRole('alert')).toBeNull();
    expect(within(node('ppo')).queryByRole('button', { name: 'Retry ppo' })).toBeNull();
    expect(node('ppo').dataset.status).toBe('waiting');
    expect(screen.getByRole('button', { name: 'Cancel pipeline' })).toBeTruthy();
    expect(gets(requests)).toEqual(['/api/v1/pipelines/5']); // the answer was the new state: no refetch needed
    client.clear();
  });

  it('cancels a running pipeline only after a confirmation', async () => {
    const running = pipelineChain({ status: 'running', reason: null, stages: [pipelineStage('sft', { status: 'running', run_id: 11, runs: [11] }), pipelineStage('rm', { needs: ['sft'] })] });
    const requests = stubApi((req) => (req.method === 'POST' ? json({ ...running, status: 'cancelled' }) : json(running)));
    const client = renderPage();
    fireEvent.click(await screen.findByRole('button', { name: 'Cancel pipeline' }));
    const dialog = screen.getByRole('dialog', { name: 'Cancel pipeline #5?' });
    expect(dialog.textContent).toContain('the running stage stops');
    fireEvent.click(within(dialog).getByRole('button', { name: 'Keep it' }));
    expect(requests.filter((r) => r.method === 'POST')).toEqual([]);

    fireEvent.click(screen.getByRole('button', { name: 'Cancel pipeline' }));
    fireEvent.click(within(screen.getByRole('dialog')).getByRole('button', { name: 'Cancel pipeline' }));
    await waitFor(() => expect(screen.queryByRole('dialog')).toBeNull());
    expect(requests.filter((r) => r.method === 'POST').map((r) => new URL(r.url).pathname)).toEqual(['/api/v1/pipelines/5/cancel']);
    expect(screen.queryByRole('button', { name: 'Cancel pipeline' })).toBeNull();
    client.clear();
  });

  it('polls every 3 s while the pipeline runs, and stops once it has ended', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true }); // Date too: TanStack times its polls against Date.now
    const answers: PipelineDetail[] = [
      pipelineChain({ status: 'running', stages: [pipelineStage('sft', { status: 'running' })] }),
      pipelineChain({ status: 'running', stages: [pipelineStage('sft', { status: 'running', headline: { key: 'train/loss', value: 2 } })] }),
      pipelineChain({ status: 'succeeded', reason: null, stages: [pipelineStage('sft', { status: 'succeeded' })] }),
    ];
    const requests = stubApi(() => json(answers[Math.min(gets(requests).length - 1, answers.length - 1)]));
    const client = renderPage();
    await screen.findByRole('listitem', { name: 'Stage sft' });
    // Counted, not waited for: vi.waitFor moves fake clocks on by itself, which would hide a slower poll.
    await vi.advanceTimersByTimeAsync(2_800);
    expect(gets(requests)).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(300);
    expect(gets(requests)).toHaveLength(2);
    await vi.waitFor(() => expect(within(node('sft')).getByTestId('stage-headline').textContent).toBe('train/loss 2'));
    await vi.advanceTimersByTimeAsync(3_000);
    expect(gets(requests)).toHaveLength(3);
    await vi.waitFor(() => expect(node('sft').dataset.status).toBe('succeeded'));
    await vi.advanceTimersByTimeAsync(10_000);
    expect(gets(requests)).toHaveLength(3);
    client.clear();
  });

  it('says so for an id that is not one', () => {
    stubApi(() => json(pipelineChain()));
    renderPage(0);
    expect(screen.getByRole('alert').textContent).toBe('“0” is not a pipeline id.');
  });
});
