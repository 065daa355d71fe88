import { NavLink, useNavigate } from 'react-router';
import { useQueryClient } from '@tanstack/react-query';
import { useMe } from '../api/queries';
import { clearToken } from '../api/token';
import { useTheme } from '../lib/theme';

const LINKS = [
  ['/runs', 'Runs'],
  ['/pipelines', 'Pipelines'],
  ['/sweeps', 'Sweeps'],
  ['/new', 'New run'],
  ['/compare', 'Compare'],
  ['/workers', 'Workers'],
  ['/queues', 'Queues'],
  ['/usage', 'Usage'],
  ['/admin', 'Admin'],
] as const;

export function TopBar() {
  const me = useMe();
  const [theme, toggleTheme] = useTheme();
  const navigate = useNavigate();
  const queryClient = useQueryClient();
  const signOut = () => {
    clearToken();
    queryClient.clear();
    navigate('/signin');
  };
  return (
    <header className="topbar">
      <a className="brand" href="/runs">
        rlplane
      </a>
      <nav aria-label="Main">
        {LINKS.map(([to, label]) => (
          <NavLink key={to} to={to}>
            {label}
          </NavLink>
        ))}
      </nav>
      <div className="topbar-right">
        <span className="user" data-testid="user-name">
          {me.data?.user.name ?? ''}
        </span>
        <button type="button" onClick={toggleTheme} aria-label={`Switch to ${theme === 'dark' ? 'light' : 'dark'} theme`}>
          {theme === 'dark' ? '☀' : '☾'}
        </button>
        <button type="button" onClick={signOut}>
          Sign out
        </button>
      </div>
    </header>
  );
}
