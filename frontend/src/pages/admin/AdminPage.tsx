import { Link, useSearchParams } from 'react-router';
import { useMe } from '../../api/queries';
import { ErrorNote } from '../../components/ErrorNote';
import { ProjectsSection } from './ProjectsSection';
import { TokensSection } from './TokensSection';
import { UsersSection } from './UsersSection';
import { isSiteAdmin } from './adminApi';
import './admin.css';

const TABS = [
  ['tokens', 'Tokens'],
  ['projects', 'Projects'],
  ['users', 'Users'],
] as const;
type Tab = (typeof TABS)[number][0];

/** /admin?tab=tokens|projects|users (+ &project=NAME, &all=1): every view has a shareable URL. */
export function AdminPage() {
  const me = useMe();
  const [params] = useSearchParams();
  const siteAdmin = me.data ? isSiteAdmin(me.data) : false;
  const tabs = TABS.filter(([id]) => id !== 'users' || siteAdmin);
  const asked = params.get('tab');
  const tab: Tab = tabs.find(([id]) => id === asked)?.[0] ?? 'tokens';

  return (
    <div className="admin-page">
      <h1>Admin</h1>
      {me.data && (
        <p className="muted">
          Signed in as <strong>{me.data.user.name}</strong>
          {me.data.user.is_site_admin && ' (site admin)'} with a token scoped {me.data.scopes.join(', ')}.
        </p>
      )}
      <ErrorNote error={me.error} />
      {me.isPending && !me.error && <p className="muted">Loading…</p>}
      {me.data && (
        <>
          <nav className="tabs" aria-label="Admin sections">
            {tabs.map(([id, label]) => (
              <Link key={id} to={`?tab=${id}`} className={id === tab ? 'active' : undefined} aria-current={id === tab ? 'page' : undefined}>
                {label}
              </Link>
            ))}
          </nav>
          {asked === 'users' && !siteAdmin && <p className="muted">Users are managed by site admins only.</p>}
          {tab === 'tokens' && <TokensSection me={me.data} />}
          {tab === 'projects' && <ProjectsSection me={me.data} />}
          {tab === 'users' && <UsersSection />}
        </>
      )}
    </div>
  );
}
