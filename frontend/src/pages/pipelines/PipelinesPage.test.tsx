import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes, useLocation } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { PipelineSummary } from '../../api/pipelines';
import { json } from '../../test/fixtures';
import { PipelinesPage } from './PipelinesPage';

const summary = (id: number, name: string, status: PipelineSummary['status'], stages: PipelineSummary['stages']): PipelineSummary => ({
  id, name, status, stages, project: 'default', created_at: '2025-01-01T00:00:00Z', updated_at: '2025-01-01T01:00:00Z',
});

const ITEMS = [
  summary(8, 'rlhf', 'running', [{ name: 'sft', status: 'succeeded' }, { name: 'rm', status: 'running' }, { name: 'ppo', status: 'waiting' }]),
  summary(3, 'dpo-sweep', 'failed', [{ name: 'sft', status: 'failed' }, { name: 'dpo', status: 'skipped' }]),
];

/** Stubs fetch; authFetch passes a relative path, the typed client a Request: both become URLs here. */
function stubApi(items: PipelineSummary[]): URL[] {
  const urls: URL[] = [];
  vi.stubGlobal('fetch', vi.fn(async (input: RequestInfo) => {
    const url = new URL(input instanceof Request ? input.url : String(input), 'http://localhost');
    urls.push(url);
    if (url.pathname === '/api/v1/pipelines') return json({ items });
    if (url.pathname === '/api/v1/projects') return json({ data: [{ id: 1, name: 'default' }, { id: 2, name: 'alignment' }], count: 2 });
    return json({ detail: 'Not Found' }, 404);
  }));
  return urls;
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
          <Route path="/pipelines" element={<><PipelinesPage /><Where /></>} />
          <Route path="*" element={<Where />} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

const strip = (row: HTMLElement) =>
  [...row.querySelectorAll<HTMLElement>('.stage-strip li')].map((li) => `${li.dataset.stage}:${li.dataset.status}`);

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('PipelinesPage', () => {
  it('lists pipelines newest first with their status and a strip of their stages in order, each row linking to its page', async () => {
    const urls = stubApi(ITEMS);
    const client = renderAt('/pipelines');
    const table = await screen.findByRole('table');
    const rows = within(table).getAllByRole('row').slice(1);
    expect(rows.map((r) => r.dataset.pipelineId)).toEqual(['8', '3']);

    const first = rows[0]!;
    expect(within(first).getByRole('rowheader').textContent).toBe('rlhf');
    expect(within(first).getByText('running').dataset.status).toBe('running');
    expect(strip(first)).toEqual(['sft:succeeded', 'rm:running', 'ppo:waiting']);
    expect(strip(rows[1]!)).toEqual(['sft:failed', 'dpo:skipped']);
    expect(within(first).getByText('rm').className).toBe('badge badge-running');
    expect(within(first).getByRole('link', { name: 'rlhf' }).getAttribute('href')).toBe('/pipelines/8');
    expect(within(rows[1]!).getByRole('link', { name: '3' }).getAttribute('href')).toBe('/pipelines/3');

    const asked = urls.find((u) => u.pathname === '/api/v1/pipelines')!;
    expect(asked.searchParams.get('project')).toBeNull();
    expect(asked.searchParams.get('limit')).toBe('100');

    fireEvent.click(within(first).getByRole('link', { name: 'rlhf' }));
    expect(screen.getByTestId('where').textContent).toBe('/pipelines/8');
    client.clear();
  });

  it('asks for the project in the URL and writes a new pick there', async () => {
    const urls = stubApi([]);
    const client = renderAt('/pipelines?project=alignment');
    expect(await screen.findByText(/No pipelines in alignment\./)).toBeTruthy();
    expect(urls.filter((u) => u.pathname === '/api/v1/pipelines').map((u) => u.searchParams.get('project'))).toEqual(['alignment']);
    fireEvent.change(screen.getByLabelText('Project'), { target: { value: '' } });
    expect(screen.getByTestId('where').textContent).toBe('/pipelines');
    await vi.waitFor(() => expect(urls.filter((u) => u.pathname === '/api/v1/pipelines').at(-1)!.searchParams.get('project')).toBeNull());
    client.clear();
  });

  it('polls the list every 5 s', async () => {
    vi.useFakeTimers({ shouldAdvanceTime: true }); // Date too: TanStack times its polls against Date.now
    const urls = stubApi(ITEMS);
    const client = renderAt('/pipelines');
    await screen.findByRole('table');
    const lists = () => urls.filter((u) => u.pathname === '/api/v1/pipelines').length;
    expect(lists()).toBe(1);
    await vi.advanceTimersByTimeAsync(4_800);
    expect(lists()).toBe(1);
    await vi.advanceTimersByTimeAsync(300);
    expect(lists()).toBe(2);
    client.clear();
  });
});
