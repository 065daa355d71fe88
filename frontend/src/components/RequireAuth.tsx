import { Navigate, Outlet, useLocation } from 'react-router';
import { getToken } from '../api/token';
import { signInPath } from '../api/unauthorized';
import { TopBar } from './TopBar';

/** The signed-in shell: without a token go to /signin, remembering where we were going. */
export function RequireAuth() {
  const location = useLocation();
  if (!getToken()) return <Navigate to={signInPath(location.pathname + location.search)} replace />;
  return (
    <>
      <TopBar />
      <main>
        <Outlet />
      </main>
    </>
  );
}
