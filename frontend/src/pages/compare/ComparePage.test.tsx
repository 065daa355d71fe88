import { afterEach, describe, expect, it, vi } from 'vitest';
import { useEffect, useReducer } from 'react';
import { fireEvent, screen, within } from '@testing-library/react';
import { queryKeys } from '../../api/queryKeys';
import type { ChartSource } from '../../charts/source';
import { asColumns } from '../../charts/testSeries';
import { renderCompareAt } from '../../test/renderCompare';

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
  // Still training: polled, and their charts take new points.
  21: run(21, 'live-a', { seed: 1 }, 'running'),
  22: run(22, 'live-b', { seed: 2 }, 'running'),
};
const METRICS: Record<number, Array<ReturnType<typeof series>>> = {
  3: [series('train/loss', [0, 10, 20]), series('train/lr', [0, 10])],
  7: [series('train/loss', [5, 15])],
  11: [series('eval/length', [1], 'NaN'), series('eval/pass@8', [1], 0.875), series('eval/accuracy', [1], 0.5), series('eval/pass@2', [1], 0.666666)],
  12: [series('eval/pass@2', [1], 0.4), series('eval/accuracy', [0, 1], 0.25)],
  13: [series('eval/accuracy', [1], 0.8), series('eval/reward', [1], 0.7)],
  14: [series('eval/accuracy', [1], 0.51), series('eval/pass@8', [1], 0.9), series('eval/reward', [1], 0.4)],
  15: [series('eval/accuracy', [1], 0.6)],
  21: [series('train/loss', [0, 10])],
  22: [series('train/loss', [5, 15])],
};

function json(body: unknown, status = 200) {
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
}

const refused = (id: number) => (id === 5 ? { status: 403, detail: 'Not allowed' } : RUNS[id] ? null : { status: 404, detail: 'Run not found' });

/** GET /api/v1/compare over RUNS and METRICS: every run's whole key list (these runs have all ended). */
function comparison(url: URL) {
  const ids = url.searchParams.get('runs')!.split(',').map(Number);
  return {
    runs: ids.map((id) => {
      const error = refused(id);
      if (error) return { id, run: null, error, keys: null };
      const keys = METRICS[id]!.map(summary);
      const count = keys.reduce((n, k) => n + k.count, 0);
      const cursor = `${count}:${Math.max(...keys.map((k) => k.last_step))}`;
      return { id, run: RUNS[id], error: null, keys: { cursor, full: true, count, data: keys } };
    }),
  };
}

type Wanted = { run_id: number; key: string; after_step?: number };

/** POST /api/v1/compare/series: each wanted series whole, or its points after `after_step`; 403 for run 5. */
function compareSeries(body: { series: Wanted[] }) {
  if (body.series.some((w) => refused(w.run_id))) return json({ detail: 'Not allowed' }, 403);
  const series = body.series.map(({ run_id, key, after_step }) => {
    const s = METRICS[run_id]!.find((m) => m.key === key)!;
    const points = s.points.filter((p) => after_step == null || p.step > after_step);
    return { ...asColumns({ ...s, points }), run_id, after_step: after_step ?? null };
  });
  return json({ max_points: 1500, series });
}

/** The fake API; returns every request it got, as "METHOD path". */
function stubApi() {
  const requests: string[] = [];
  const bodies: Wanted[][] = [];
  vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
    const url = new URL(req.url);
    requests.push(`${req.method} ${url.pathname}`);
    if (url.pathname === '/api/v1/compare') return json(comparison(url));
    if (url.pathname === '/api/v1/compare/series' && req.method === 'POST') {
      const body = (await req.json()) as { series: Wanted[] };
      bodies.push(body.series);
      return compareSeries(body);
    }
    return json({ detail: `unexpected ${url.pathname}` }, 404);
  }));
  return { requests, bodies };
}


afterEach(() => vi.unstubAllGlobals());

const chart = (key: string) => document.querySelector<HTMLElement>(`[data-chart="${key}"]`);
const byRunAndKey = (a: Wanted, b: Wanted) => a.run_id - b.run_id || a.key.localeCompare(b.key);

describe('ComparePage', () => {
  it('shows the legend, one chart per key with the runs that have it, and the spec diff', async () => {
    const { requests, bodies } = stubApi();
    const client = renderCompareAt('/compare?runs=3,7&smooth=0');
    expect(screen.getByRole('heading', { level: 1, name: 'Compare runs' })).toBeTruthy();
    const legend = screen.getByRole('list', { name: 'Compared runs' });
    expect(await within(legend).findByRole('link', { name: '#3 alpha' })).toBeTruthy();
    expect(within(legend).getByRole('link', { name: '#7 beta' }).getAttribute('href')).toBe('/runs/7');

    await vi.waitFor(() => expect(document.querySelector<HTMLElement>('[data-chart="train/loss"]')?.dataset.series).toBe('2'));
    const loss = document.querySelector<HTMLElement>('[data-chart="train/loss"]')!;
    expect(loss.dataset.points).toBe('5'); // union of 0,10,20 and 5,15
    await vi.waitFor(() => expect(document.querySelector<HTMLElement>('[data-chart="train/lr"]')!.dataset.series).toBe('1'));
    // One request for both runs' details and keys, one for both charts of both runs: none per run.
    expect(requests).toEqual(['GET /api/v1/compare', 'POST /api/v1/compare/series']);
    expect([...bodies[0]!].sort(byRunAndKey)).toEqual([
      { run_id: 3, key: 'train/loss' }, { run_id: 3, key: 'train/lr' }, { run_id: 7, key: 'train/loss' },
    ]);

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
    const client = renderCompareAt('/compare?runs=3,99,5,7,abc');
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
    const client = renderCompareAt('/compare?runs=11,12');
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
    const client = renderCompareAt('/compare?runs=13,14,15');
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

  it("after a poll, fetches only the points each run's charts lack, for all runs in one request", async () => {
    const { requests, bodies } = stubApi();
    const client = renderCompareAt('/compare?runs=21,22');
    await vi.waitFor(() => expect(chart('train/loss')?.dataset.points).toBe('4'));
    METRICS[21] = [series('train/loss', [0, 10, 20])];
    METRICS[22] = [series('train/loss', [5, 15, 25, 35])];
    await client.refetchQueries({ queryKey: queryKeys.compare.all() });
    await vi.waitFor(() => expect(chart('train/loss')?.dataset.points).toBe('7'));
    expect(bodies.at(-1)).toEqual([{ run_id: 21, key: 'train/loss', after_step: 10 }, { run_id: 22, key: 'train/loss', after_step: 15 }]);
    expect(requests).toEqual(['GET /api/v1/compare', 'POST /api/v1/compare/series', 'GET /api/v1/compare', 'POST /api/v1/compare/series']);
    client.clear();
  });

  it('asks for two runs when given fewer', () => {
    stubApi();
    const client = renderCompareAt('/compare');
    expect(screen.getByText(/Pick at least two runs on the/).textContent).toContain('Runs page');
    expect(document.querySelector('[data-chart]')).toBeNull();
    client.clear();
  });
});
