import { clearToken } from './token';

// The router registers its navigate here so a 401 deep inside a query can leave the page
// without a full reload; before that (or in tests) we fall back to location.
type Navigate = (to: string) => void;
let navigate: Navigate = (to) => window.location.assign(to);

export function setUnauthorizedNavigator(fn: Navigate): void {
  navigate = fn;
}

export function signInPath(next: string): string {
  return next && next !== '/' && !next.startsWith('/signin') ? `/signin?next=${encodeURIComponent(next)}` : '/signin';
}

export function handleUnauthorized(): void {
  clearToken();
  const { pathname, search, hash } = window.location;
  if (pathname.startsWith('/signin')) return;
  navigate(signInPath(pathname + search + hash));
}
