import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { json, runDetail } from '../../test/fixtures';
import { renderTab } from '../../test/renderTab';
import { evalAt, metadataLines } from './checkpointEval';
import { CheckpointsTab } from './CheckpointsTab';

const ckpt = (step: number, kind = 'checkpoint', metadata: Record<string, unknown> = { kind }) => ({
  id: kind === 'export' ? -step : step, run_id: 7, step, kind, path: `7/checkpoints/step-${step}`, size: 2048, sha256: 'ab'.repeat(32),
  metadata, created_at: '2025-01-01T00:00:00Z',
});
const point = (step: number, value: number | 'NaN') => ({ step, value, min: value, max: value, count: 1, time: 0 });
const SIGNED = '/api/v1/runs/7/checkpoints/200/archive?kind=checkpoint&expires=1735689900&token_id=3&sig=c2ln';

afterEach(() => vi.unstubAllGlobals());

describe('CheckpointsTab', () => {
  it('shows the eval metrics at each checkpoint, readable metadata, and downloads the whole checkpoint through a signed link', async () => {
    localStorage.setItem('rlplane.token', 'secret');
    const requests: Request[] = [];
    vi.stubGlobal('fetch', vi.fn(async (input: Request | string, init?: RequestInit) => {
      const req = typeof input === 'string' ? new Request(new URL(input, 'http://x'), init) : input;
      requests.push(req);
      const { pathname, searchParams } = new URL(req.url);
      if (pathname.endsWith('/checkpoints')) {
        return json({ data: [ckpt(200), ckpt(300), ckpt(300, 'export', { kind: 'export', format: 'hf' })], count: 3 });
      }
      if (pathname.endsWith('/metrics/keys')) {
        const key = (k: string) => ({ key: k, count: 2, last_step: 200, last_value: 1, last_time: 0 });
        return json({ data: [key('train/loss'), key('eval/loss'), key('eval/accuracy')], count: 3 });
      }
      if (pathname.endsWith('/metrics')) {
        expect(searchParams.getAll('keys')).toEqual(['eval/accuracy', 'eval/loss']);
        return json({
          run_id: 7, max_points: 20000,
          series: [
            { key: 'eval/accuracy', total_points: 2, downsampled: false, points: [point(100, 0.5), point(200, 0.75)] },
            { key: 'eval/loss', total_points: 2, downsampled: false, points: [point(100, 0.9), point(200, 0.595)] },
          ],
        });
      }
      if (pathname.endsWith('/download-url')) return json({ url: SIGNED, expires_at: '2025-01-01T00:05:00Z' });
      return json({ detail: 'unexpected' }, 404);
    }));
    const createObjectURL = vi.fn(() => 'blob:x');
    vi.stubGlobal('URL', Object.assign(URL, { createObjectURL, revokeObjectURL: vi.fn() }));
    const clicked: { href: string; download: string }[] = [];
    const click = vi.spyOn(HTMLAnchorElement.prototype, 'click').mockImplementation(function (this: HTMLAnchorElement) {
      clicked.push({ href: this.getAttribute('href')!, download: this.download });
    });

    renderTab(<CheckpointsTab />, runDetail({ name: 'base' }));
    const row200 = (await screen.findByRole('rowheader', { name: '200' })).closest('tr')!;
    await waitFor(() => expect(within(row200).getByText('eval/loss').nextSibling?.textContent).toBe('0.595'));
    expect(within(row200).getByText('eval/accuracy').nextSibling?.textContent).toBe('0.75');
    const row300 = document.querySelector('tr[data-step="300"][data-kind="checkpoint"]')!;
    expect(within(row300 as HTMLElement).getByText('eval/loss').nextSibling?.textContent).toBe('0.595 (step 200)');
    const exportRow = document.querySelector('tr[data-kind="export"]') as HTMLElement;
    expect(within(exportRow).getByText('format').nextSibling?.textContent).toBe('hf');
    expect(document.body.textContent).not.toContain('{"kind"');

    fireEvent.click(within(row200).getByRole('button', { name: /^Download/ }));
    // A failed download shows its error instead: the assertion then prints it.
    await waitFor(() =>
      expect(screen.queryByRole('alert')?.textContent ?? clicked).toEqual([{ href: SIGNED, download: 'run-7-checkpoint-step-200.tar' }]),
    );
    // The link is asked for with the token; the file itself is left to the browser: never fetched, never a blob.
    const asked = requests.find((r) => r.url.includes('/download-url'))!;
    expect(asked.method).toBe('POST');
    expect(new URL(asked.url).pathname + new URL(asked.url).search).toBe('/api/v1/runs/7/checkpoints/200/download-url?kind=checkpoint');
    expect(asked.headers.get('Authorization')).toBe('Bearer secret');
    expect(await asked.text()).toBe('{}');
    expect(requests.filter((r) => /\/(archive|files\/)/.test(new URL(r.url).pathname))).toEqual([]);
    expect(createObjectURL).not.toHaveBeenCalled();
    click.mockRestore();

    const start = within(row200).getByRole('link', { name: 'Start a run from this checkpoint' });
    const params = new URLSearchParams(start.getAttribute('href')!.split('?')[1]);
    expect(Object.fromEntries(params)).toEqual({ clone: '7', model: 'run:7@200', name: 'base-from-step-200' });
  });

  it('downloads one file of a checkpoint through a signed link for that file', async () => {
    const requests: Request[] = [];
    const url = '/api/v1/runs/7/checkpoints/200/files/optim/state.json?kind=checkpoint&expires=1&token_id=3&sig=c2ln';
    vi.stubGlobal('fetch', vi.fn(async (input: Request) => {
      requests.push(input);
      const { pathname } = new URL(input.url);
      if (pathname.endsWith('/checkpoints')) return json({ data: [ckpt(200)], count: 1 });
      if (pathname.endsWith('/metrics/keys')) return json({ data: [], count: 0 });
      if (pathname.endsWith('/200/files')) return json({ data: [{ name: 'optim/state.json', size: 36 }], count: 1 });
      if (pathname.endsWith('/download-url')) return json({ url, expires_at: '2025-01-01T00:05:00Z' });
      return json({ detail: 'unexpected' }, 404);
    }));
    const clicked: { href: string; download: string }[] = [];
    const click = vi.spyOn(HTMLAnchorElement.prototype, 'click').mockImplementation(function (this: HTMLAnchorElement) {
      clicked.push({ href: this.getAttribute('href')!, download: this.download });
    });
    renderTab(<CheckpointsTab />, runDetail({ name: 'base' }));
    fireEvent.click(await screen.findByRole('button', { name: 'List files' }));
    fireEvent.click(await screen.findByRole('button', { name: 'optim/state.json' }));
    await waitFor(() => expect(screen.queryByRole('alert')?.textContent ?? clicked).toEqual([{ href: url, download: 'state.json' }]));
    const asked = requests.find((r) => r.url.includes('/download-url'))!;
    expect(await asked.json()).toEqual({ file: 'optim/state.json' });
    expect(requests.filter((r) => new URL(r.url).pathname.includes('/files/'))).toEqual([]);
    click.mockRestore();
  });

  it("shows each checkpoint's eval runs with their metrics in reading order, and Evaluate opens an eval of it", async () => {
    const evaluation = (run_id: number, metrics: Record<string, number | string>, status = 'succeeded') => ({
      run_id, name: `eval-base-${run_id}`, status, data: 'builtin:arithmetic', reward: 'builtin:arithmetic', samples: 16, metrics,
    });
    vi.stubGlobal('fetch', vi.fn(async (input: Request | string) => {
      const { pathname } = new URL(typeof input === 'string' ? input : input.url, 'http://x');
      if (pathname.endsWith('/checkpoints')) {
        return json({
          data: [
            { ...ckpt(100), evaluations: [] },
            {
              ...ckpt(200),
              evaluations: [
                evaluation(21, { 'eval/pass@16': 0.9, 'eval/accuracy': 0.51234, 'eval/pass@4': 'NaN', 'eval/length': 3.5, 'eval/truncated': 0 }),
                evaluation(22, {}, 'running'),
              ],
            },
            { ...ckpt(200, 'export', { kind: 'export' }), evaluations: [evaluation(23, { 'eval/accuracy': 'Infinity' })] },
          ],
          count: 3,
        });
      }
      if (pathname.endsWith('/metrics/keys')) return json({ data: [], count: 0 });
      return json({ detail: 'unexpected' }, 404);
    }));
    renderTab(<CheckpointsTab />, runDetail({ name: 'base' }));

    const table = await screen.findByRole('table', { name: 'Evaluations of step 200' });
    const headers = within(table).getAllByRole('columnheader').map((h) => h.textContent);
    expect(headers).toEqual(['Eval run', 'Status', 'Data', 'Reward', 'Samples', 'accuracy', 'pass@4', 'pass@16', 'length', 'truncated']);
    const [, first, second] = within(table).getAllByRole('row');
    expect(within(first!).getByRole('link', { name: '#21 eval-base-21' }).getAttribute('href')).toBe('/runs/21');
    expect(within(first!).getAllByRole('cell').map((c) => c.textContent)).toEqual([
      'succeeded', 'builtin:arithmetic', 'builtin:arithmetic', '16', '0.5123', 'NaN', '0.9', '3.5', '0',
    ]);
    // A run still evaluating has reported nothing yet.
    expect(within(second!).getAllByRole('cell').map((c) => c.textContent)).toEqual([
      'running', 'builtin:arithmetic', 'builtin:arithmetic', '16', '—', '—', '—', '—', '—',
    ]);
    const output = screen.getByRole('table', { name: "Evaluations of the run's output" });
    expect(within(output).getByRole('link', { name: '#23 eval-base-23' })).toBeTruthy();
    expect(within(output).getByText('Infinity')).toBeTruthy();
    // A checkpoint nobody evaluated shows nothing more.
    expect(screen.getAllByRole('table', { name: /^Evaluations of/ })).toHaveLength(2);

    const query = (row: Element) =>
      Object.fromEntries(new URLSearchParams(within(row as HTMLElement).getByRole('link', { name: 'Evaluate' }).getAttribute('href')!.split('?')[1]));
    expect(query(document.querySelector('tr[data-step="200"][data-kind="checkpoint"]')!)).toEqual({ algorithm: 'eval', from: '7', model: 'run:7@200' });
    expect(query(document.querySelector('tr[data-kind="export"]')!)).toEqual({ algorithm: 'eval', from: '7', model: 'run:7' });
  });

  it("says how each accuracy's answers were drawn: the run's own evaluations by its config, each eval run by its own", async () => {
    const evaluation = (run_id: number, decoding: string | null, metrics: Record<string, number>) => ({
      run_id, name: `eval-${run_id}`, status: 'succeeded', data: 'builtin:arithmetic', reward: 'builtin:arithmetic', samples: 8, decoding, metrics,
    });
    vi.stubGlobal('fetch', vi.fn(async (input: Request | string) => {
      const { pathname } = new URL(typeof input === 'string' ? input : input.url, 'http://x');
      if (pathname.endsWith('/checkpoints')) {
        return json({
          data: [{
            ...ckpt(200),
            evaluations: [
              evaluation(21, 'greedy', { 'eval/accuracy': 0.8, 'eval/reward': 0.7 }),
              evaluation(22, 'sampled at T=1, 8 per prompt', { 'eval/accuracy': 0.51, 'eval/pass@8': 0.9, 'eval/reward': 0.4 }),
              evaluation(23, null, { 'eval/accuracy': 0.6 }),
            ],
          }],
          count: 1,
        });
      }
      if (pathname.endsWith('/metrics/keys')) {
        const key = (k: string) => ({ key: k, count: 1, last_step: 200, last_value: 1, last_time: 0 });
        return json({ data: [key('eval/accuracy'), key('eval/reward')], count: 2 });
      }
      if (pathname.endsWith('/metrics')) {
        return json({
          run_id: 7, max_points: 20000,
          series: [
            { key: 'eval/accuracy', total_points: 1, downsampled: false, points: [point(200, 0.8)] },
            { key: 'eval/reward', total_points: 1, downsampled: false, points: [point(200, 0.3)] },
          ],
        });
      }
      return json({ detail: 'unexpected' }, 404);
    }));
    const grpo = runDetail({ algorithm: 'grpo', config: { ...runDetail().config, decoding: 'greedy' } });
    renderTab(<CheckpointsTab />, grpo);

    const row = (await screen.findByRole('rowheader', { name: '200' })).closest('tr')!;
    await waitFor(() => expect(within(row).getByText('eval/accuracy').nextSibling?.textContent).toBe('0.8 greedy'));
    expect(within(row).getByText('eval/reward').nextSibling?.textContent).toBe('0.3'); // not an accuracy

    const table = screen.getByRole('table', { name: 'Evaluations of step 200' });
    const cells = (runId: number) => Array.from(table.querySelectorAll(`tr[data-run="${runId}"] td[data-key]`), (c) => c.textContent);
    expect(within(table).getAllByRole('columnheader').slice(5).map((h) => h.textContent)).toEqual(['accuracy', 'pass@8', 'reward']);
    expect(cells(21)).toEqual(['0.8 greedy', '—', '0.7']);
    expect(cells(22)).toEqual(['0.51 T=1 ×8', '0.9 T=1 ×8', '0.4']);
    expect(cells(23)).toEqual(['0.6', '—', '—']);
    expect(table.querySelector('tr[data-run="22"] [data-key="eval/accuracy"] .decoding')?.getAttribute('title')).toBe(
      'answers drawn: sampled at T=1, 8 per prompt',
    );
  });

  it('picks the evaluation at or before a step, and flattens metadata', () => {
    const series = [{ key: 'eval/loss', total_points: 3, downsampled: false, points: [point(10, 3), point(20, 2), point(30, 'NaN')] }];
    expect(evalAt(series, 25)).toEqual([{ key: 'eval/loss', value: 2, step: 20 }]);
    expect(evalAt(series, 30)).toEqual([{ key: 'eval/loss', value: 'NaN', step: 30 }]);
    expect(evalAt(series, 5)).toEqual([]);
    expect(metadataLines({ kind: 'export', format: 'hf', shards: { count: 2 }, tags: ['a', 'b'] }, ['kind'])).toEqual([
      ['format', 'hf'], ['shards.count', '2'], ['tags', 'a, b'],
    ]);
  });
});
