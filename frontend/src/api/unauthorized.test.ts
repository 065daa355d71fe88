import { beforeEach, describe, expect, it, vi } from 'vitest';
import { api, unwrap, ApiError } from './client';
import { getToken, setToken } from './token';
import { setUnauthorizedNavigator, signInPath } from './unauthorized';

describe('401 handling', () => {
  beforeEach(() => {
    window.history.replaceState(null, '', '/runs/7/logs?rank=1');
  });

  it('clears the token and goes to /signin keeping the wanted page in ?next=', async () => {
    setToken('stale');
    const navigate = vi.fn();
    setUnauthorizedNavigator(navigate);
    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ detail: 'invalid token' }), { status: 401, headers: { 'Content-Type': 'application/json' } })));
    await expect(unwrap(api.GET('/api/v1/me'))).rejects.toBeInstanceOf(ApiError);
    vi.unstubAllGlobals();
    expect(getToken()).toBeNull();
    expect(navigate).toHaveBeenCalledWith('/signin?next=%2Fruns%2F7%2Flogs%3Frank%3D1');
  });

  it('sends the bearer token on requests', async () => {
    setToken('good-token');
    const seen: string[] = [];
    vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
      seen.push(req.headers.get('Authorization') ?? '');
      return new Response('{"data":[],"count":0}', { status: 200, headers: { 'Content-Type': 'application/json' } });
    }));
    await unwrap(api.GET('/api/v1/runs'));
    vi.unstubAllGlobals();
    expect(seen).toEqual(['Bearer good-token']);
  });

  it('never nests /signin in next', () => {
    expect(signInPath('/signin?next=x')).toBe('/signin');
    expect(signInPath('/')).toBe('/signin');
  });
});
