import { afterEach, describe, expect, it, vi } from 'vitest';
import { useEffect, useReducer } from 'react';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes, useLocation } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { ChartSource } from '../../charts/source';
import { asColumns } from '../../charts/testSeries';
import { ComparePage } from './ComparePage';

// uPlot needs a canvas; the chart is stood in for by its container and attributes, fed like the real one.
vi.mock('../../charts/MetricChart', () => ({
  MetricChart: ({ source, metricKey }: { source: ChartSource; metricKey: string }) => {
    const [, redraw] = useReducer((n: number) => n + 1, 0);
    useEffect(() => {
      const off = source.subscribe(metricKey, redraw);
      source.request(metricKey);
      return off;
    }, [source, metricKey]);
    const lines = source.lines(metricKey).filter((l) => l.buf && l.buf.steps.length > 0);
    const steps = new Set(lines.flatMap((l) => l.buf!.steps));
    return <div data-chart={metricKey} data-series={lines.length} data-points={steps.size} />;
  },
}));

const run = (id: number, name: string, spec: object, status = 'succeeded', config: Record<string, unknown> = {}) => ({
  id, name, status, project: 'default', algorithm: 'sft', backend: 'fake', queue: 'cpu', priority: 50, preempted_by: null, status_reason: '', archived: false,
  total_steps: 100, last_step: 100, created_by: 'admin', created_at: '2025-01-01T00:00:00Z', updated_at: '2025-01-01T00:00:00Z',
  started_at: null, ended_at: null, latest_checkpoint_step: null, output: null, attempts: [], parents: [], children: [], spec, config,
});
const series = (key: string, steps: number[], value?: number | 'NaN') => ({
  key, total_points: steps.length, downsampled: false,
  points: steps.map((step) => ({ step, value: value ?? step / 10, min: null, max: null, count: 1, time: step, first_nan_step: null })),
});
const summary = (s: ReturnType<typeof series>) => ({
  key: s.key, count: s.total_points, last_step: s.points.at(-1)!.step, last_value: s.points.at(-1)!.value, last_time: 1,
});

const RUNS: Record<number, ReturnType<typeof run>> = {
  3: run(3, 'alpha', { train: { lr: 0.0001, steps: 100 }, seed: 1 }),
  7: run(7, 'beta', { train: { lr: 0.0002, steps: 100 }, seed: 1 }),
  11: run(11, 'eval-a', { algorithm: 'eval', model: { path: 'run:3@100' } }),
  12: run(12, 'eval-b', { algorithm: 'eval', model: { path: 'run:7@100' } }),
  // One checkpoint judged twice, and a reward model (which draws no answers).
  13: run(13, 'greedy', { algorithm: 'eval', model: { path: 'run:3@100' } }, 'succeeded', { decoding: 'greedy' }),
  14: run(14, 'sampled', { algorithm: 'eval', model: { path: 'run:3@100' } }, 'succeeded', { decoding: 'sampled at T=1, 8 per prompt' }),
  15: run(15, 'rm', { algorithm: 'reward' }, 'succeeded', { decoding: null }),
};
const METRICS: Record<number, Array<ReturnType<typeof series>>> = {
  3: [series('train/loss', [0, 10, 20]), series('train/lr', [0, 10])],
  7: [series('train/loss', [5, 15])],
  11: [series('eval/length', [1], 'NaN'), series('eval/pass@8', [1], 0.875), series('eval/accuracy', [1], 0.5), series('eval/pass@2', [1], 0.666666)],
  12: [series('eval/pass@2', [1], 0.4), series('eval/accuracy', [0, 1], 0.25)],
  13: [series('eval/accuracy', [1], 0.8), series('eval/reward', [1], 0.7)],
  14: [series('eval/accuracy', [1], 0.51), series('eval/pass@8', [1], 0.9), series('eval/reward', [1], 0.4)],
  15: [series('eval/accuracy', [1], 0.6)],
};

function json(body: unknown, status = 200) {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
}

function stubApi() {
  vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
    const url = new URL(req.url);
    const m = /\/api\/v1\/runs\/(\d+)(\/metrics(\/keys|\/columns))?$/.exec(url.pathname);
    const id = Number(m?.[1]);
    if (id === 5) return json({ detail: 'Not allowed' }, 403);
    if (!m || !RUNS[id]) return json({ detail: 'Run not found' }, 404);
    const all = METRICS[id]!;
    if (m[3] === '/keys') return json({ data: all.map(summary), count: all.length });
    const keys = url.searchParams.getAll('keys');
    if (m[2]) return json({ run_id: id, max_points: 1500, series: all.filter((s) => keys.includes(s.key)).map(asColumns) });
    return json(RUNS[id]);
  }));
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
          <Route path="/compare" element={<><ComparePage /><Where /></>} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

afterEach(() => vi.unstubAllGlobals());

describe('ComparePage', () => {
  it('shows the legend, one chart per key with the runs that have it, and the spec diff', async () => {
    stubApi();
    const client = renderAt('/compare?runs=3,7&smooth=0');
    expect(screen.getByRole('heading', { level: 1, name: 'Compare runs' })).toBeTruthy();
    const legend = screen.getByRole('list', { name: 'Compared runs' });
    expect(await within(legend).findByRole('link', { name: '#3 alpha' })).toBeTruthy();
    expect(within(legend).getByRole('link', { name: '#7 beta' }).getAttribute('href')).toBe('/runs/7');

    await vi.waitFor(() => expect(document.querySelector<HTMLElement>('[data-chart="train/loss"]')?.dataset.series).toBe('2'));
    const loss = document.querySelector<HTMLElement>('[data-chart="train/loss"]')!;
    expect(loss.dataset.points).toBe('5'); // union of 0,10,20 and 5,15
    await vi.waitFor(() => expect(document.querySelector<HTMLElement>('[data-chart="train/lr"]')!.dataset.series).toBe('1'));

    expect(screen.queryByRole('region', { name: 'Final values' })).toBeNull(); // no eval/* keys to compare
    const diff = screen.getByRole('region', { name: 'Spec differences' });
    const rows = within(diff).getAllByRole('row');
    expect(rows).toHaveLength(2); // header + train.lr
    expect(within(rows[1]!).getByText('0.0002').closest('td')!.className).toBe('cell-differs');
    fireEvent.click(within(diff).getByRole('checkbox', { name: 'Show all fields' }));
    expect(within(diff).getAllByRole('row')).toHaveLength(4);

    fireEvent.click(screen.getByRole('button', { name: 'Remove run 7 from comparison' }));
    expect(screen.getByTestId('where').textContent).toBe('/compare?runs=3&smooth=0');
    expect(screen.getByText(/Pick at least two runs on the/)).toBeTruthy();
    client.clear();
  });

  it('names missing and forbidden runs inline and still compares the others', async () => {
    stubApi();
    const client = renderAt('/compare?runs=3,99,5,7,abc');
    expect(await screen.findByText('run 99: not found')).toBeTruthy();
    expect(await screen.findByText(/run 5: no access/)).toBeTruthy();
    expect(screen.getByText(/Ignored "abc"/)).toBeTruthy();
    await vi.waitFor(() =>
      expect(document.querySelector<HTMLElement>('[data-chart="train/loss"]')?.dataset.series).toBe('2'),
    );
    fireEvent.change(screen.getByLabelText('Add run'), { target: { value: '12' } });
    fireEvent.click(screen.getByRole('button', { name: 'Add' }));
    expect(screen.getByTestId('where').textContent).toBe('/compare?runs=3,99,5,7,12');
    client.clear();
  });

  it("puts eval runs' last eval/* values side by side, in reading order, a dash where a run has none", async () => {
    stubApi();
    const client = renderAt('/compare?runs=11,12');
    const table = await screen.findByRole('region', { name: 'Final values' });
    await vi.waitFor(() => expect(within(table).getAllByRole('columnheader').map((h) => h.textContent)).toEqual(['Metric', '#11 eval-a', '#12 eval-b']));
    const rows = within(table).getAllByRole('row').slice(1).map((r) => Array.from(r.children, (c) => c.textContent));
    expect(rows).toEqual([
      ['eval/accuracy', '0.5', '0.25'],
      ['eval/pass@2', '0.6667', '0.4'],
      ['eval/pass@8', '0.875', '—'],
      ['eval/length', 'NaN', '—'],
    ]);
    client.clear();
  });

  it("says beside each run's accuracies how that run drew its answers, nothing for a run that draws none", async () => {
    stubApi();
    const client = renderAt('/compare?runs=13,14,15');
    const table = await screen.findByRole('region', { name: 'Final values' });
    await vi.waitFor(() => expect(within(table).getAllByRole('columnheader')).toHaveLength(4));
    const rows = within(table).getAllByRole('row').slice(1).map((r) => Array.from(r.children, (c) => c.textContent));
    expect(rows).toEqual([
      ['eval/accuracy', '0.8 greedy', '0.51 T=1 ×8', '0.6'],
      ['eval/pass@8', '—', '0.9 T=1 ×8', '—'],
      ['eval/reward', '0.7', '0.4', '—'],
    ]);
    expect(table.querySelector('tr[data-key="eval/accuracy"] .decoding')?.getAttribute('title')).toBe('answers drawn: greedy');
    client.clear();
  });

  it('asks for two runs when given fewer', () => {
    stubApi();
    const client = renderAt('/compare');
    expect(screen.getByText(/Pick at least two runs on the/).textContent).toContain('Runs page');
    expect(document.querySelector('[data-chart]')).toBeNull();
    client.clear();
  });
});
