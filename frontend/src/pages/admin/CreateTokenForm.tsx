import { useState, type FormEvent } from 'react';
import type { Me } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { Field } from './Field';
import { fieldError, grantedScopes, SCOPE_HELP, SCOPES, useCreateToken, type Scope, type TokenCreated, unplacedError } from './adminApi';

interface Props {
  me: Me;
  onCreated: (token: TokenCreated) => void;
}

function toggleScope(scopes: Scope[], scope: Scope, on: boolean): Scope[] {
  if (!on) return scopes.filter((s) => s !== scope);
  // `worker` stands alone (the API refuses it with any other scope).
  if (scope === 'worker') return ['worker'];
  return [...scopes.filter((s) => s !== 'worker'), scope];
}

export function CreateTokenForm({ me, onCreated }: Props) {
  const create = useCreateToken();
  const [name, setName] = useState('');
  const [scopes, setScopes] = useState<Scope[]>(['read']);
  const [days, setDays] = useState('');
  const granted = grantedScopes(me);
  const canCreate = granted.has('write');

  const why = (scope: Scope): string | undefined => {
    if (scope === 'worker') return me.user.is_site_admin && granted.has('admin') ? undefined : 'site admins only';
    return granted.has(scope) ? undefined : 'your token lacks it';
  };

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    try {
      const created = await create.mutateAsync({
        name: name.trim(),
        scopes,
        expires_in_days: days.trim() === '' ? null : Number(days),
      });
      create.reset(); // drop the secret from the mutation state; the parent holds it while shown
      setName('');
      setDays('');
      onCreated(created);
    } catch {
      // shown from create.error below
    }
  };

  const error = create.error;
  const scopeError = fieldError(error, 'scopes');
  return (
    <form className="admin-form" onSubmit={submit} aria-labelledby="create-token-title">
      <h2 id="create-token-title">Create a token</h2>
      {!canCreate && <p className="muted">Creating tokens needs a token with the write scope; yours has {me.scopes.join(', ')}.</p>}
      <div className="admin-form-row">
        <Field label="Token name" value={name} onChange={(e) => setName(e.target.value)} error={fieldError(error, 'name')} maxLength={128} />
        <Field
          label="Expires in (days)"
          type="number"
          min={1}
          max={3650}
          inputMode="numeric"
          placeholder="never"
          value={days}
          onChange={(e) => setDays(e.target.value)}
          error={fieldError(error, 'expires_in_days')}
          hint="Empty: never expires"
        />
      </div>
      <fieldset aria-describedby={scopeError ? 'token-scopes-error' : undefined}>
        <legend>Scopes</legend>
        {SCOPES.map((scope) => {
          const reason = why(scope);
          return (
            <label key={scope} className="check" title={reason ?? SCOPE_HELP[scope]}>
              <input
                type="checkbox"
                checked={scopes.includes(scope)}
                disabled={reason !== undefined}
                onChange={(e) => setScopes(toggleScope(scopes, scope, e.target.checked))}
              />
              {scope}
              <span className="muted scope-help">({reason ?? SCOPE_HELP[scope]})</span>
            </label>
          );
        })}
        {scopeError && (
          <small id="token-scopes-error" className="error field-error">
            {scopeError}
          </small>
        )}
      </fieldset>
      <ErrorNote error={unplacedError(error, ['name', 'scopes', 'expires_in_days'])} />
      <button type="submit" disabled={!canCreate || create.isPending}>
        Create token
      </button>
    </form>
  );
}
