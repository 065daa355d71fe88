import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { MemoryRouter, Route, Routes } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { AdminPage } from './AdminPage';

const T0 = '2025-01-01T00:00:00Z';
const user = (name: string, isSiteAdmin: boolean) => ({
  id: 1, name, email: null, is_site_admin: isSiteAdmin, disabled: false, created_at: T0,
});
const token = (id: number, name: string, revoked: string | null = null) => ({
  id, name, user: 'admin', prefix: 'rlp_abcd', scopes: ['read'], created_at: T0, expires_at: null, revoked_at: revoked,
});

function json(body: unknown, status = 200) {
  return new Response(status === 204 ? null : JSON.stringify(body), {
    status, headers: { 'Content-Type': 'application/json' },
  });
}

type Handler = (req: Request, url: URL, body: unknown) => Response | undefined;

/** Routes fetches to `handler`; records every request as "METHOD /path?query". */
function stubApi(handler: Handler) {
  const calls: string[] = [];
  vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
    const url = new URL(req.url);
    calls.push(`${req.method} ${url.pathname}${url.search}`);
    const text = req.method === 'GET' || req.method === 'DELETE' ? '' : await req.text();
    return handler(req, url, text ? JSON.parse(text) : undefined) ?? json({ detail: 'not found' }, 404);
  }));
  return calls;
}

function renderAt(path: string) {
  const client = new QueryClient({ defaultOptions: { queries: { retry: false } } });
  render(
    <QueryClientProvider client={client}>
      <MemoryRouter initialEntries={[path]}>
        <Routes>
          <Route path="/admin" element={<AdminPage />} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
  return client;
}

afterEach(() => {
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
});

describe('AdminPage tokens', () => {
  it('shows a created secret once with Copy, and revokes only after confirming', async () => {
    const tokens = [token(1, 'laptop')];
    const calls = stubApi((req, url, body) => {
      if (url.pathname === '/api/v1/me') return json({ user: user('admin', true), scopes: ['admin'], roles: {} });
      if (url.pathname === '/api/v1/tokens' && req.method === 'GET') return json({ data: tokens, count: tokens.length });
      if (url.pathname === '/api/v1/tokens' && req.method === 'POST') {
        const b = body as { name: string; scopes: string[] };
        const created = { ...token(2, b.name), scopes: b.scopes };
        tokens.push(created);
        return json({ ...created, token: 'rlp_secret_value' }, 201);
      }
      if (url.pathname === '/api/v1/tokens/1' && req.method === 'DELETE') {
        tokens[0] = token(1, 'laptop', '2025-02-01T00:00:00Z');
        return json(tokens[0]);
      }
    });
    const writeText = vi.fn(async () => undefined);
    vi.stubGlobal('navigator', { ...navigator, clipboard: { writeText } });
    const client = renderAt('/admin?tab=tokens');

    expect(await screen.findByRole('heading', { level: 1, name: 'Admin' })).toBeTruthy();
    await screen.findByText('laptop');
    fireEvent.change(screen.getByLabelText('Token name'), { target: { value: 'ci' } });
    fireEvent.click(screen.getByRole('checkbox', { name: /^write/ }));
    fireEvent.click(screen.getByRole('button', { name: 'Create token' }));

    const secret = (await screen.findByTestId('new-token-secret')) as HTMLTextAreaElement;
    expect(secret.value).toBe('rlp_secret_value');
    expect(secret.textContent).toBe('rlp_secret_value'); // readable as text as well as a field value
    expect(secret.readOnly).toBe(true);
    expect(document.activeElement).toBe(secret);
    expect(screen.getByText(/only time it is shown/)).toBeTruthy();
    expect(calls).toContain('POST /api/v1/tokens');
    fireEvent.click(screen.getByRole('button', { name: 'Copy' }));
    await waitFor(() => expect(writeText).toHaveBeenCalledWith('rlp_secret_value'));
    expect(await screen.findByText('Copied to the clipboard.')).toBeTruthy();
    // The secret lives nowhere in the query or mutation caches.
    expect(JSON.stringify(client.getQueryCache().getAll().map((q) => q.state.data))).not.toContain('rlp_secret_value');
    expect(JSON.stringify(client.getMutationCache().getAll().map((m) => m.state.data))).not.toContain('rlp_secret_value');
    fireEvent.click(screen.getByRole('button', { name: 'Done, hide it' }));
    expect(screen.queryByTestId('new-token-secret')).toBeNull();

    const row = document.querySelector('[data-token-id="1"]') as HTMLElement;
    fireEvent.click(within(row).getByRole('button', { name: 'Revoke' }));
    const dialog = await screen.findByRole('dialog');
    expect(calls.filter((c) => c.startsWith('DELETE'))).toHaveLength(0);
    fireEvent.click(within(dialog).getByRole('button', { name: 'Cancel' }));
    expect(screen.queryByRole('dialog')).toBeNull();
    expect(calls.filter((c) => c.startsWith('DELETE'))).toHaveLength(0);

    fireEvent.click(within(row).getByRole('button', { name: 'Revoke' }));
    fireEvent.click(within(await screen.findByRole('dialog')).getByRole('button', { name: 'Confirm' }));
    await waitFor(() => expect(screen.queryByRole('dialog')).toBeNull());
    expect(calls).toContain('DELETE /api/v1/tokens/1');
    const revokedRow = document.querySelector('[data-token-id="1"]') as HTMLElement;
    expect(within(revokedRow).getByText(/^revoked/)).toBeTruthy();
    expect((within(revokedRow).getByRole('button', { name: 'Revoke' }) as HTMLButtonElement).disabled).toBe(true);
  });

  it('falls back to selecting the secret when the clipboard refuses, and lists all tokens for site admins', async () => {
    const calls = stubApi((req, url) => {
      if (url.pathname === '/api/v1/me') return json({ user: user('admin', true), scopes: ['admin'], roles: {} });
      if (url.pathname === '/api/v1/tokens' && req.method === 'GET') return json({ data: [], count: 0 });
      if (url.pathname === '/api/v1/tokens') return json({ ...token(3, 'x'), token: 'rlp_other' }, 201);
    });
    vi.stubGlobal('navigator', { ...navigator, clipboard: { writeText: vi.fn(async () => Promise.reject(new Error('denied'))) } });
    renderAt('/admin');
    fireEvent.click(await screen.findByRole('checkbox', { name: "all users' tokens" }));
    await waitFor(() => expect(calls).toContain('GET /api/v1/tokens?all_users=true'));
    fireEvent.change(screen.getByLabelText('Token name'), { target: { value: 'x' } });
    fireEvent.click(screen.getByRole('button', { name: 'Create token' }));
    const secret = (await screen.findByTestId('new-token-secret')) as HTMLTextAreaElement;
    secret.setSelectionRange(0, 0);
    fireEvent.click(screen.getByRole('button', { name: 'Copy' }));
    expect(await screen.findByText(/Could not copy here/)).toBeTruthy();
    expect(secret.selectionEnd - secret.selectionStart).toBe('rlp_other'.length);
  });

  it('shows a 422 on token create next to its field', async () => {
    stubApi((req, url) => {
      if (url.pathname === '/api/v1/me') return json({ user: user('bob', false), scopes: ['write'], roles: {} });
      if (url.pathname === '/api/v1/tokens' && req.method === 'GET') return json({ data: [], count: 0 });
      if (url.pathname === '/api/v1/tokens') {
        return json({ detail: [{ loc: ['body', 'name'], msg: 'String should have at least 1 character', type: 'x' }] }, 422);
      }
    });
    renderAt('/admin');
    fireEvent.click(await screen.findByRole('button', { name: 'Create token' }));
    expect((screen.getByRole('checkbox', { name: /^admin/ }) as HTMLInputElement).disabled).toBe(true);
    expect((screen.getByRole('checkbox', { name: /^worker/ }) as HTMLInputElement).disabled).toBe(true);
    expect(await screen.findByText('String should have at least 1 character')).toBeTruthy();
    expect(screen.getByLabelText('Token name').getAttribute('aria-invalid')).toBe('true');
    expect(screen.queryByTestId('new-token-secret')).toBeNull();
  });
});

describe('AdminPage projects and users', () => {
  const nonAdmin: Handler = (req, url) => {
    if (url.pathname === '/api/v1/me') {
      return json({ user: user('bob', false), scopes: ['admin'], roles: { alpha: 'member', beta: 'admin' } });
    }
    if (url.pathname === '/api/v1/projects') {
      return json({
        data: [
          { id: 1, name: 'alpha', description: '', created_at: T0, role: 'member' },
          { id: 2, name: 'beta', description: '', created_at: T0, role: 'admin' },
        ],
        count: 2,
      });
    }
    const m = url.pathname.match(/^\/api\/v1\/projects\/(\w+)$/);
    if (m) {
      const role = m[1] === 'beta' ? 'admin' : 'member';
      return json({ id: 1, name: m[1], description: '', created_at: T0, role, members: [{ user: 'bob', role }, { user: 'carol', role: 'viewer' }] });
    }
    if (url.pathname === '/api/v1/tokens' && req.method === 'GET') return json({ data: [], count: 0 });
  };

  it('hides Users and member controls from a non-admin who does not administer the project', async () => {
    const calls = stubApi(nonAdmin);
    renderAt('/admin?tab=users');
    await screen.findByText(/Users are managed by site admins only/);
    expect(screen.queryByRole('link', { name: 'Users' })).toBeNull();
    expect(screen.queryByRole('heading', { name: 'Users' })).toBeNull();
    expect(calls.some((c) => c.includes('/api/v1/users'))).toBe(false);

    fireEvent.click(screen.getByRole('link', { name: 'Projects' }));
    await screen.findByRole('link', { name: 'alpha' });
    expect(screen.queryByRole('button', { name: 'Create project' })).toBeNull();
    expect(screen.getByText(/Only a site admin/)).toBeTruthy();

    fireEvent.click(screen.getByRole('link', { name: 'alpha' }));
    await screen.findByRole('rowheader', { name: 'carol' });
    expect(screen.queryByRole('button', { name: /Remove/ })).toBeNull();
    expect(screen.queryByRole('button', { name: 'Add member' })).toBeNull();
    expect(screen.getByTestId('members-readonly')).toBeTruthy();
  });

  it('gives a project admin member controls; removing asks first', async () => {
    const calls = stubApi((req, url, body) => {
      if (req.method === 'DELETE' && url.pathname === '/api/v1/projects/beta/members/carol') return json(null, 204);
      return nonAdmin(req, url, body);
    });
    renderAt('/admin?tab=projects&project=beta');
    fireEvent.click(await screen.findByRole('button', { name: 'Remove carol' }));
    expect(calls.some((c) => c.startsWith('DELETE'))).toBe(false);
    fireEvent.click(within(await screen.findByRole('dialog')).getByRole('button', { name: 'Confirm' }));
    await waitFor(() => expect(calls).toContain('DELETE /api/v1/projects/beta/members/carol'));
    expect(screen.getByRole('button', { name: 'Add member' })).toBeTruthy();
  });

  it('shows a 422 on project create next to the name field', async () => {
    stubApi((req, url) => {
      if (url.pathname === '/api/v1/me') return json({ user: user('admin', true), scopes: ['admin'], roles: {} });
      if (url.pathname === '/api/v1/projects' && req.method === 'GET') return json({ data: [], count: 0 });
      if (url.pathname === '/api/v1/projects') {
        return json({ detail: [{ loc: ['body', 'name'], msg: "String should match pattern '^[A-Za-z0-9]'", type: 'string_pattern_mismatch' }] }, 422);
      }
    });
    renderAt('/admin?tab=projects');
    fireEvent.change(await screen.findByLabelText('Project name'), { target: { value: 'bad name!' } });
    fireEvent.click(screen.getByRole('button', { name: 'Create project' }));
    const message = await screen.findByText("String should match pattern '^[A-Za-z0-9]'");
    const input = screen.getByLabelText('Project name');
    expect(input.getAttribute('aria-invalid')).toBe('true');
    expect(input.getAttribute('aria-describedby')).toContain(message.id);
    expect(screen.queryByRole('alert')).toBeNull(); // not repeated as a page-level error
  });

  it('lets a site admin create a user with an initial token shown once', async () => {
    const calls = stubApi((req, url, body) => {
      if (url.pathname === '/api/v1/me') return json({ user: user('admin', true), scopes: ['admin'], roles: {} });
      if (url.pathname === '/api/v1/users' && req.method === 'GET') return json({ data: [user('admin', true)], count: 1 });
      if (url.pathname === '/api/v1/users') return json({ ...user((body as { name: string }).name, false), id: 2 }, 201);
      if (url.pathname === '/api/v1/tokens') {
        expect(body).toEqual({ name: 'initial', scopes: ['write'], user: 'dana' });
        return json({ ...token(9, 'initial'), user: 'dana', token: 'rlp_dana' }, 201);
      }
    });
    renderAt('/admin?tab=users');
    await screen.findByRole('rowheader', { name: 'admin' });
    fireEvent.change(screen.getByLabelText('User name'), { target: { value: 'dana' } });
    fireEvent.click(screen.getByRole('button', { name: 'Create user' }));
    const secret = (await screen.findByTestId('new-token-secret')) as HTMLTextAreaElement;
    expect(secret.value).toBe('rlp_dana');
    expect(calls).toContain('POST /api/v1/users');
  });

  it('puts a 409 (name taken) on user create next to the name field', async () => {
    stubApi((req, url) => {
      if (url.pathname === '/api/v1/me') return json({ user: user('admin', true), scopes: ['admin'], roles: {} });
      if (url.pathname === '/api/v1/users' && req.method === 'GET') return json({ data: [user('admin', true)], count: 1 });
      if (url.pathname === '/api/v1/users') return json({ detail: "user 'admin' already exists" }, 409);
    });
    renderAt('/admin?tab=users');
    fireEvent.change(await screen.findByLabelText('User name'), { target: { value: 'admin' } });
    fireEvent.click(screen.getByRole('button', { name: 'Create user' }));
    expect(await screen.findByText("user 'admin' already exists")).toBeTruthy();
    expect(screen.getByLabelText('User name').getAttribute('aria-invalid')).toBe('true');
    expect(screen.queryByTestId('new-token-secret')).toBeNull();
  });
});

describe('AdminPage project scheduling and quotas', () => {
  const quota = (queue: string, over: object = {}) => ({ queue, max_gpus: null, max_runs: null, used_gpus: 0, used_runs: 0, ...over });
  const project = (over: object = {}) => ({
    id: 1, name: 'alpha', description: '', created_at: T0, role: null, members: [{ user: 'bob', role: 'admin' }],
    default_priority: 50, member_max_priority: 50, share: 1,
    quotas: [quota('a100', { max_gpus: 8, max_runs: 4, used_gpus: 3, used_runs: 1 }), quota('cpu', { max_runs: 2, used_gpus: 1 })],
    ...over,
  });

  /** A site admin on project alpha, whose detail is `state.detail`; `extra` answers the writes. */
  function siteAdmin(state: { detail: ReturnType<typeof project> }, extra: Handler): Handler {
    return (req, url, body) => {
      if (url.pathname === '/api/v1/me') return json({ user: user('admin', true), scopes: ['admin'], roles: {} });
      if (url.pathname === '/api/v1/projects' && req.method === 'GET') return json({ data: [], count: 0 });
      if (url.pathname === '/api/v1/projects/alpha' && req.method === 'GET') return json(state.detail);
      return extra(req, url, body);
    };
  }
  const cells = (queue: string) =>
    [...document.querySelector(`[data-quota="${queue}"]`)!.querySelectorAll('td')].map((td) => td.textContent).filter((t) => t !== 'Remove');

  it('shows the scheduling values and each quota as used of its limit', async () => {
    stubApi(siteAdmin({ detail: project({ default_priority: 75, member_max_priority: 60, share: 2.5 }) }, () => undefined));
    renderAt('/admin?tab=projects&project=alpha');
    const summary = await screen.findByTestId('scheduling-summary');
    expect(summary.textContent).toBe('Runs without a priority get 75 (high); members may ask for up to 60; fair share 2.5.');
    expect(cells('a100')).toEqual(['3 of 8', '1 of 4']);
    expect(cells('cpu')).toEqual(['1 (no limit)', '0 of 2']);
    expect((screen.getByLabelText('Default priority') as HTMLInputElement).value).toBe('75');
    expect((screen.getByLabelText('Share') as HTMLInputElement).value).toBe('2.5');
  });

  it('sends the scheduling form as a PATCH, a name as typed, and shows what the API made of it', async () => {
    const state = { detail: project() };
    const bodies: unknown[] = [];
    const calls = stubApi(siteAdmin(state, (req, url, body) => {
      if (req.method === 'PATCH' && url.pathname === '/api/v1/projects/alpha/scheduling') {
        bodies.push(body);
        state.detail = project({ default_priority: 75, member_max_priority: 60, share: 2 });
        return json(state.detail);
      }
    }));
    renderAt('/admin?tab=projects&project=alpha');
    fireEvent.change(await screen.findByLabelText('Default priority'), { target: { value: ' high ' } });
    fireEvent.change(screen.getByLabelText('Member max priority'), { target: { value: '60' } });
    fireEvent.change(screen.getByLabelText('Share'), { target: { value: '2' } });
    fireEvent.click(screen.getByRole('button', { name: 'Save scheduling' }));
    await waitFor(() => expect(calls).toContain('PATCH /api/v1/projects/alpha/scheduling'));
    expect(bodies).toEqual([{ default_priority: 'high', member_max_priority: 60, share: 2 }]);
    await waitFor(() => expect(screen.getByTestId('scheduling-summary').textContent).toContain('get 75 (high)'));
    expect((screen.getByLabelText('Default priority') as HTMLInputElement).value).toBe('75');
  });

  it('shows a 422 on the scheduling form next to its field', async () => {
    stubApi(siteAdmin({ detail: project() }, (req) => {
      if (req.method === 'PATCH') {
        return json({ detail: [{ loc: ['body', 'share'], msg: 'Input should be greater than 0', type: 'greater_than' }] }, 422);
      }
    }));
    renderAt('/admin?tab=projects&project=alpha');
    fireEvent.change(await screen.findByLabelText('Share'), { target: { value: '0' } });
    fireEvent.click(screen.getByRole('button', { name: 'Save scheduling' }));
    const message = await screen.findByText('Input should be greater than 0');
    const input = screen.getByLabelText('Share');
    expect(input.getAttribute('aria-invalid')).toBe('true');
    expect(input.getAttribute('aria-describedby')).toContain(message.id);
    expect(screen.queryByRole('alert')).toBeNull();
  });

  it('adds a quota with a PUT, an empty limit as none, and shows a 403 from it', async () => {
    const state = { detail: project() };
    const bodies: unknown[] = [];
    const calls = stubApi(siteAdmin(state, (req, url, body) => {
      if (req.method !== 'PUT') return undefined;
      if (url.pathname === '/api/v1/projects/alpha/quotas/locked') return json({ detail: 'site admin only' }, 403);
      if (url.pathname === '/api/v1/projects/alpha/quotas/h100') {
        bodies.push(body);
        state.detail = project({ quotas: [...state.detail.quotas, quota('h100', { max_gpus: 16 })] });
        return json(state.detail);
      }
    }));
    renderAt('/admin?tab=projects&project=alpha');
    fireEvent.change(await screen.findByLabelText('Queue'), { target: { value: 'h100' } });
    fireEvent.change(screen.getByLabelText('Max GPUs'), { target: { value: '16' } });
    fireEvent.click(screen.getByRole('button', { name: 'Set quota' }));
    await waitFor(() => expect(cells('h100')).toEqual(['0 of 16', '0 (no limit)']));
    expect(calls).toContain('PUT /api/v1/projects/alpha/quotas/h100');
    expect(bodies).toEqual([{ max_gpus: 16, max_runs: null }]);
    expect((screen.getByLabelText('Queue') as HTMLInputElement).value).toBe('');

    fireEvent.change(screen.getByLabelText('Queue'), { target: { value: 'locked' } });
    fireEvent.click(screen.getByRole('button', { name: 'Set quota' }));
    expect((await screen.findByRole('alert')).textContent).toBe('403: site admin only');
  });

  it('removes a quota with a DELETE after confirming', async () => {
    const state = { detail: project() };
    const calls = stubApi(siteAdmin(state, (req, url) => {
      if (req.method === 'DELETE' && url.pathname === '/api/v1/projects/alpha/quotas/a100') {
        state.detail = project({ quotas: state.detail.quotas.filter((q) => q.queue !== 'a100') });
        return json(null, 204);
      }
    }));
    renderAt('/admin?tab=projects&project=alpha');
    fireEvent.click(await screen.findByRole('button', { name: 'Remove the a100 quota' }));
    expect(calls.some((c) => c.startsWith('DELETE'))).toBe(false);
    fireEvent.click(within(await screen.findByRole('dialog')).getByRole('button', { name: 'Confirm' }));
    await waitFor(() => expect(document.querySelector('[data-quota="a100"]')).toBeNull());
    expect(calls).toContain('DELETE /api/v1/projects/alpha/quotas/a100');
    expect(document.querySelector('[data-quota="cpu"]')).toBeTruthy();
  });

  it('shows scheduling and quotas read-only to someone not a site admin', async () => {
    stubApi((_req, url) => {
      if (url.pathname === '/api/v1/me') return json({ user: user('bob', false), scopes: ['admin'], roles: { alpha: 'admin' } });
      if (url.pathname === '/api/v1/projects/alpha') return json(project({ role: 'admin' }));
    });
    renderAt('/admin?tab=projects&project=alpha');
    await screen.findByTestId('scheduling-readonly');
    expect(cells('a100')).toEqual(['3 of 8', '1 of 4']);
    expect(screen.queryByRole('button', { name: /quota/ })).toBeNull();
    expect(screen.queryByRole('button', { name: 'Save scheduling' })).toBeNull();
    expect(screen.getByRole('button', { name: 'Add member' })).toBeTruthy(); // the project's admin still manages members
  });
});
