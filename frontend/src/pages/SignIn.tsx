import { useState, type FormEvent } from 'react';
import { useNavigate, useSearchParams } from 'react-router';
import { useQueryClient } from '@tanstack/react-query';
import { detailText } from '../api/client';
import { setToken } from '../api/token';

// Only same-site paths, so a crafted ?next= cannot send the user elsewhere.
function safeNext(next: string | null): string {
  return next && next.startsWith('/') && !next.startsWith('//') ? next : '/runs';
}

export function SignIn() {
  const [token, setValue] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const [params] = useSearchParams();
  const navigate = useNavigate();
  const queryClient = useQueryClient();

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      // Checked with a plain fetch: the shared client would treat this 401 as "session expired".
      const response = await fetch('/api/v1/me', { headers: { Authorization: `Bearer ${token.trim()}` } });
      if (!response.ok) {
        const body: unknown = await response.json().catch(() => null);
        setError(response.status === 401 ? 'That token was refused: check it, or create a new one with `rlplane tokens create`.' : detailText(body));
        return;
      }
      setToken(token.trim());
      queryClient.clear();
      navigate(safeNext(params.get('next')), { replace: true });
    } catch (err) {
      setError(`Could not reach the API: ${String(err)}`);
    } finally {
      setBusy(false);
    }
  };

  return (
    <main className="signin">
      <h1>Sign in to rlplane</h1>
      <form onSubmit={submit}>
        <label htmlFor="token">API token</label>
        <input
          id="token"
          name="token"
          type="password"
          autoComplete="current-password"
          value={token}
          onChange={(e) => setValue(e.target.value)}
          required
        />
        <p className="hint">On the server machine, the first token is in <code>$RLPLANE_HOME/admin.token</code>.</p>
        <button type="submit" disabled={busy || !token.trim()}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
        {error && (
          <p role="alert" className="error">
            {error}
          </p>
        )}
      </form>
    </main>
  );
}
