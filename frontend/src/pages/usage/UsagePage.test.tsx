import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { UsagePage } from './UsagePage';
import { chartSeries, type UsageRow } from './usage';

// jsdom has no canvas: a stand-in uPlot records what the chart asks of it.
const plots: Array<{ labels: (string | undefined)[]; data: number[][] }> = [];
vi.mock('uplot', () => ({
  default: function Plot(opts: { series: Array<{ label?: string }> }, data: number[][]) {
    plots.push({ labels: opts.series.map((s) => s.label), data });
    return { setSize() {}, destroy() {} };
  },
}));

const DAY1 = '2025-03-01T00:00:00Z';
const DAY2 = '2025-03-02T00:00:00Z';
const row = (key: string, over: Partial<UsageRow> = {}): UsageRow => ({
  key, gpu_seconds: 0, cpu_slot_seconds: 0, tokens: 0, tokens_per_gpu_second: null, attempts: 1, runs: 1, over_time: [], ...over,
});
const bucket = (start: string, gpu_seconds: number) => ({ start, gpu_seconds, cpu_slot_seconds: 0, tokens: 0 });

/** Answers every usage request with `rows`; records each request's URL and, for a plain fetch, its headers. */
function stubUsage(rows: (by: string) => UsageRow[]) {
  const requests: Array<{ url: URL; headers: Headers }> = [];
  vi.stubGlobal('fetch', vi.fn(async (input: Request | string, init?: RequestInit) => {
    const req = typeof input === 'string' ? new Request(new URL(input, 'http://x'), init) : input;
    const url = new URL(req.url);
    requests.push({ url, headers: req.headers });
    const q = url.searchParams;
    if (q.get('format') === 'csv') return new Response('key,gpu_seconds\n', { status: 200, headers: { 'Content-Type': 'text/csv' } });
    const by = q.get('by') ?? 'project';
    const body = { since: q.get('since'), until: q.get('until'), by, interval: q.get('interval'), data: rows(by) };
    return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } });
  }));
  return requests;
}

function renderPage(path = '/usage') {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[path]}>
        <UsagePage />
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

const cells = (key: string) => [...document.querySelector(`tr[data-key="${key}"]`)!.querySelectorAll('td')].map((td) => td.textContent);
const hoursApart = (url: URL) => (Date.parse(url.searchParams.get('until')!) - Date.parse(url.searchParams.get('since')!)) / 3_600_000;

beforeEach(() => {
  plots.length = 0;
  vi.stubGlobal('ResizeObserver', class { observe() {} disconnect() {} });
});
afterEach(() => {
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
});

describe('UsagePage', () => {
  it('tables hours per key and charts GPU hours per day over the last 7 days, by project', async () => {
    const requests = stubUsage(() => [
      row('llm', {
        gpu_seconds: 36_000, cpu_slot_seconds: 5_400, tokens: 9_000_000, tokens_per_gpu_second: 250, runs: 2, attempts: 3,
        over_time: [bucket(DAY1, 7_200), bucket(DAY2, 28_800)],
      }),
      row('vision', { gpu_seconds: 1_800, over_time: [bucket(DAY2, 1_800)] }),
      row('cpu-only', { cpu_slot_seconds: 900 }),
    ]);
    const client = renderPage();
    expect(screen.getByRole('heading', { level: 1, name: 'Usage' })).toBeTruthy();
    await screen.findByRole('rowheader', { name: 'llm' });

    const q = requests[0]!.url.searchParams;
    expect([requests[0]!.url.pathname, q.get('by'), q.get('interval')]).toEqual(['/api/v1/usage', 'project', 'day']);
    expect(hoursApart(requests[0]!.url)).toBe(7 * 24);
    expect(screen.getAllByRole('columnheader').map((th) => th.textContent)).toEqual([
      'Project', 'GPU hours', 'CPU slot hours', 'Tokens', 'Tokens / GPU·s', 'Runs', 'Attempts',
    ]);
    expect(cells('llm')).toEqual(['10.00', '1.50', '9,000,000', '250', '2', '3']);
    expect(cells('vision')).toEqual(['0.50', '0.00', '0', '—', '1', '1']);
    expect(cells('cpu-only')).toEqual(['0.00', '0.25', '0', '—', '1', '1']);
    expect(screen.getByText(/^10\.50 GPU hours and 1\.75 CPU slot hours in all/)).toBeTruthy();

    // Keys without GPU use draw no line.
    const chart = screen.getByTestId('usage-chart');
    expect([chart.dataset.series, chart.dataset.points]).toEqual(['2', '2']);
    expect(plots.at(-1)!.labels).toEqual(['day', 'llm', 'vision']);
    expect(plots.at(-1)!.data).toEqual([[Date.parse(DAY1) / 1000, Date.parse(DAY2) / 1000], [2, 8], [0, 0.5]]);
    client.clear();
  });

  it('asks again by the group picked, and links runs', async () => {
    const requests = stubUsage((by) => (by === 'run' ? [row('42 grpo-big', { gpu_seconds: 3_600 })] : [row('llm', { gpu_seconds: 3_600 })]));
    const client = renderPage();
    await screen.findByRole('rowheader', { name: 'llm' });
    fireEvent.change(screen.getByLabelText('Group by'), { target: { value: 'run' } });
    const link = await screen.findByRole('link', { name: '#42 grpo-big' });
    expect(link.getAttribute('href')).toBe('/runs/42');
    expect(requests.at(-1)!.url.searchParams.get('by')).toBe('run');
    expect(screen.getAllByRole('columnheader')[0]!.textContent).toBe('Run');
    client.clear();
  });

  it('asks per hour over the last 24 hours and per day over 30 days', async () => {
    const requests = stubUsage(() => [row('llm', { gpu_seconds: 3_600 })]);
    const client = renderPage('/usage?by=user');
    await screen.findByRole('rowheader', { name: 'llm' });
    expect(requests[0]!.url.searchParams.get('by')).toBe('user');

    fireEvent.change(screen.getByLabelText('Period'), { target: { value: '24h' } });
    await waitFor(() => expect(requests.at(-1)!.url.searchParams.get('interval')).toBe('hour'));
    expect([hoursApart(requests.at(-1)!.url), requests.at(-1)!.url.searchParams.get('by')]).toEqual([24, 'user']);

    fireEvent.change(screen.getByLabelText('Period'), { target: { value: '30d' } });
    await waitFor(() => expect(hoursApart(requests.at(-1)!.url)).toBe(30 * 24));
    expect(requests.at(-1)!.url.searchParams.get('interval')).toBe('day');
    client.clear();
  });

  it('downloads the same report as CSV with the token', async () => {
    localStorage.setItem('rlplane.token', 'secret');
    const requests = stubUsage(() => [row('llm', { gpu_seconds: 3_600 })]);
    vi.stubGlobal('URL', Object.assign(URL, { createObjectURL: vi.fn(() => 'blob:x'), revokeObjectURL: vi.fn() }));
    const clicked: string[] = [];
    vi.spyOn(HTMLAnchorElement.prototype, 'click').mockImplementation(function (this: HTMLAnchorElement) {
      clicked.push(this.download);
    });
    const client = renderPage('/usage?period=24h&by=queue');
    await screen.findByRole('rowheader', { name: 'llm' });

    fireEvent.click(screen.getByRole('button', { name: 'Download CSV' }));
    // A failed download shows its error instead: the assertion then prints it.
    await waitFor(() => expect(screen.queryByRole('alert')?.textContent ?? clicked).toEqual(['usage-queue-24h.csv']));
    const csv = requests.at(-1)!;
    expect(csv.url.pathname).toBe('/api/v1/usage');
    expect(Object.fromEntries([...csv.url.searchParams].filter(([k]) => !['since', 'until'].includes(k)))).toEqual({
      by: 'queue', interval: 'hour', format: 'csv',
    });
    expect(hoursApart(csv.url)).toBe(24);
    expect(csv.headers.get('Authorization')).toBe('Bearer secret');
    client.clear();
  });

  it('says so when nothing was used, without a table, chart or download', async () => {
    stubUsage(() => []);
    const client = renderPage('/usage?period=30d');
    expect(await screen.findByText('No GPU or CPU use in the last 30 days among the runs you can read.')).toBeTruthy();
    expect(document.querySelector('table')).toBeNull();
    expect(screen.queryByTestId('usage-chart')).toBeNull();
    expect(screen.queryByRole('button', { name: 'Download CSV' })).toBeNull();
    // The controls stay, to look at another period.
    expect(within(screen.getByLabelText('Period') as HTMLElement).getAllByRole('option')).toHaveLength(3);
    client.clear();
  });
});

describe('chartSeries', () => {
  it('draws the largest keys, sums the rest into "other", and counts a missing bucket as zero', () => {
    const rows = Array.from({ length: 10 }, (_, i) => row(`p${i}`, { gpu_seconds: 3_600 * (10 - i), over_time: [bucket(i % 2 ? DAY2 : DAY1, 3_600)] }));
    const { x, series } = chartSeries(rows);
    expect(x).toEqual([Date.parse(DAY1) / 1000, Date.parse(DAY2) / 1000]);
    expect(series.map((s) => s.label)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'other (3)']);
    expect(series[0]!.values).toEqual([1, 0]);
    expect(series[1]!.values).toEqual([0, 1]);
    expect(series.at(-1)!.values).toEqual([1, 2]); // p7 on day 2, p8 on day 1, p9 on day 2
    expect(new Set(series.map((s) => s.color)).size).toBe(8);
  });
});
