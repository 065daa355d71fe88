import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { MemoryRouter } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import type { RunDetail } from '../../api/types';
import { json, runDetail } from '../../test/fixtures';
import { RunHeader } from './RunHeader';

function renderHeader(run: RunDetail) {
  render(
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
});
