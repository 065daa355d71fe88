import { useState, type FormEvent } from 'react';
import { ErrorNote } from '../../components/ErrorNote';
import { formatDate } from '../../lib/format';
import { Field } from './Field';
import { SecretOnce } from './SecretOnce';
import { fieldError, unplacedError, useCreateToken, useCreateUser, useUsers, type Scope } from './adminApi';

const INITIAL_SCOPES: Scope[] = ['read', 'write', 'admin'];

function CreateUserForm({ onSecret }: { onSecret: (value: string, what: string) => void }) {
  const createUser = useCreateUser();
  const createToken = useCreateToken();
  const [name, setName] = useState('');
  const [email, setEmail] = useState('');
  const [siteAdmin, setSiteAdmin] = useState(false);
  const [withToken, setWithToken] = useState(true);
  const [scope, setScope] = useState<Scope>('write');
  const [tokenError, setTokenError] = useState<{ user: string; error: unknown } | null>(null);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setTokenError(null);
    let user;
    try {
      user = await createUser.mutateAsync({ name: name.trim(), email: email.trim() || null, is_site_admin: siteAdmin });
    } catch {
      return; // shown next to the fields
    }
    setName('');
    setEmail('');
    setSiteAdmin(false);
    if (!withToken) return;
    try {
      // POST /users makes no token; a site admin mints the first one for them.
      const token = await createToken.mutateAsync({ name: 'initial', scopes: [scope], user: user.name });
      createToken.reset();
      onSecret(token.token, `${user.name} (token 'initial', ${scope})`);
    } catch (error) {
      setTokenError({ user: user.name, error });
    }
  };

  const error = createUser.error;
  return (
    <form className="admin-form" onSubmit={submit} aria-labelledby="create-user-title">
      <h2 id="create-user-title">Create a user</h2>
      <div className="admin-form-row">
        <Field label="User name" value={name} onChange={(e) => setName(e.target.value)} error={fieldError(error, 'name')} />
        <Field label="Email (optional)" type="email" value={email} onChange={(e) => setEmail(e.target.value)} error={fieldError(error, 'email')} />
      </div>
      <label className="check">
        <input type="checkbox" checked={siteAdmin} onChange={(e) => setSiteAdmin(e.target.checked)} />
        Site admin
      </label>
      <label className="check">
        <input type="checkbox" checked={withToken} onChange={(e) => setWithToken(e.target.checked)} />
        Create an initial token
      </label>
      {withToken && (
        <label className="check">
          Initial token scope
          <select value={scope} onChange={(e) => setScope(e.target.value as Scope)}>
            {INITIAL_SCOPES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
      )}
      <ErrorNote error={unplacedError(error, ['name', 'email'])} />
      {tokenError && (
        <p role="alert" className="error">
          User {tokenError.user} was created, but their token was not:{' '}
          {tokenError.error instanceof Error ? tokenError.error.message : String(tokenError.error)}. Create one from the Tokens tab.
        </p>
      )}
      <button type="submit" disabled={createUser.isPending || createToken.isPending}>
        Create user
      </button>
    </form>
  );
}

export function UsersSection() {
  const users = useUsers(true);
  const [secret, setSecret] = useState<{ value: string; what: string } | null>(null);
  const rows = users.data?.data ?? [];
  return (
    <section aria-labelledby="users-title">
      <h2 id="users-title">Users</h2>
      <ErrorNote error={users.error} />
      {users.isPending && !users.error && <p className="muted">Loading…</p>}
      {rows.length > 0 && (
        <table className="admin-table">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Email</th>
              <th scope="col">Site admin</th>
              <th scope="col">Disabled</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((u) => (
              <tr key={u.id} data-user={u.name}>
                <th scope="row">{u.name}</th>
                <td>{u.email ?? <span className="muted">—</span>}</td>
                <td>{u.is_site_admin ? 'yes' : 'no'}</td>
                <td>{u.disabled ? 'yes' : 'no'}</td>
                <td>{formatDate(u.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {secret && <SecretOnce secret={secret.value} what={secret.what} onDismiss={() => setSecret(null)} />}
      <CreateUserForm onSecret={(value, what) => setSecret({ value, what })} />
    </section>
  );
}
