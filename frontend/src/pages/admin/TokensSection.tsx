import { useState } from 'react';
import { useSearchParams } from 'react-router';
import type { Me } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { formatDate } from '../../lib/format';
import { ConfirmDialog } from '../../components/ConfirmDialog';
import { CreateTokenForm } from './CreateTokenForm';
import { SecretOnce } from './SecretOnce';
import { isSiteAdmin, useRevokeToken, useTokens, type Token } from './adminApi';

function tokenState(t: Token, now: number): { label: string; cls: string } {
  if (t.revoked_at) return { label: `revoked ${formatDate(t.revoked_at)}`, cls: 'revoked' };
  if (t.expires_at && new Date(t.expires_at).getTime() <= now) return { label: 'expired', cls: 'expired' };
  return { label: 'active', cls: 'active' };
}

export function TokensSection({ me }: { me: Me }) {
  const [params, setParams] = useSearchParams();
  const siteAdmin = isSiteAdmin(me);
  const all = siteAdmin && params.get('all') === '1';
  const tokens = useTokens(all);
  const revoke = useRevokeToken();
  const [confirming, setConfirming] = useState<Token | null>(null);
  // The once-shown secret lives only here: dismissing it or leaving the page drops it.
  const [secret, setSecret] = useState<{ value: string; what: string } | null>(null);

  const setAll = (on: boolean) => {
    const next = new URLSearchParams(params);
    if (on) next.set('all', '1');
    else next.delete('all');
    setParams(next, { replace: true });
  };
  const cancelRevoke = () => {
    setConfirming(null);
    revoke.reset();
  };
  const confirmRevoke = async () => {
    if (!confirming) return;
    try {
      await revoke.mutateAsync(confirming.id);
      setConfirming(null);
    } catch {
      // shown inside the dialog
    }
  };
  const now = Date.now();
  const rows = tokens.data?.data ?? [];

  return (
    <section aria-labelledby="tokens-title">
      <h2 id="tokens-title">{all ? "All users' tokens" : 'Your tokens'}</h2>
      {siteAdmin && (
        <label className="check">
          <input type="checkbox" checked={all} onChange={(e) => setAll(e.target.checked)} />
          all users&apos; tokens
        </label>
      )}
      <ErrorNote error={tokens.error} />
      {tokens.isPending && !tokens.error && <p className="muted">Loading…</p>}
      {tokens.data && rows.length === 0 && <p className="muted">No tokens.</p>}
      {rows.length > 0 && (
        <table className="admin-table">
          <thead>
            <tr>
              <th scope="col">Name</th>
              {all && <th scope="col">User</th>}
              <th scope="col">Prefix</th>
              <th scope="col">Scopes</th>
              <th scope="col">Created</th>
              <th scope="col">Expires</th>
              <th scope="col">Status</th>
              <th scope="col">
                <span className="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {rows.map((t) => {
              const state = tokenState(t, now);
              return (
                <tr key={t.id} data-token-id={t.id} className={`token-${state.cls}`}>
                  <th scope="row">{t.name}</th>
                  {all && <td>{t.user}</td>}
                  <td>
                    <code>{t.prefix}…</code>
                  </td>
                  <td>{t.scopes.join(', ')}</td>
                  <td>{formatDate(t.created_at)}</td>
                  <td>{t.expires_at ? formatDate(t.expires_at) : 'never'}</td>
                  <td data-state={state.cls}>{state.label}</td>
                  <td>
                    <button
                      type="button"
                      className="danger"
                      disabled={t.revoked_at != null}
                      title={t.revoked_at ? 'Already revoked' : undefined}
                      onClick={() => setConfirming(t)}
                    >
                      Revoke
                    </button>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      <p className="muted small">The API does not record when a token was last used.</p>
      {confirming && (
        <ConfirmDialog
          title={`Revoke token '${confirming.name}'?`}
          confirmLabel="Confirm"
          busy={revoke.isPending}
          error={revoke.error}
          onConfirm={confirmRevoke}
          onCancel={cancelRevoke}
        >
          <p>
            Anything using <code>{confirming.prefix}…</code>
            {confirming.user !== me.user.name && ` (owned by ${confirming.user})`} stops working at once. This cannot be undone. If it is
            the token you signed in with, you will be signed out.
          </p>
        </ConfirmDialog>
      )}
      {secret && <SecretOnce secret={secret.value} what={secret.what} onDismiss={() => setSecret(null)} />}
      <CreateTokenForm me={me} onCreated={(t) => setSecret({ value: t.token, what: `token '${t.name}'` })} />
    </section>
  );
}
