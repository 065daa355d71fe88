import { useEffect, useState, useSyncExternalStore } from 'react';

export type Theme = 'light' | 'dark';
const KEY = 'rlplane.theme';

// No saved choice means "follow the system", so the OS setting wins until the user picks one.
function initial(): Theme {
  const saved = localStorage.getItem(KEY);
  if (saved === 'light' || saved === 'dark') return saved;
  return window.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

export function useTheme(): [Theme, () => void] {
  const [theme, setTheme] = useState<Theme>(initial);
  useEffect(() => {
    document.documentElement.dataset.theme = theme;
  }, [theme]);
  const toggle = () =>
    setTheme((t) => {
      const next = t === 'dark' ? 'light' : 'dark';
      localStorage.setItem(KEY, next);
      return next;
    });
  return [theme, toggle];
}

// The toggle flips `data-theme` on <html>; charts read colours from CSS variables when they are
// built, so they watch the attribute and rebuild.
function subscribeThemeAttribute(notify: () => void): () => void {
  const observer = new MutationObserver(notify);
  observer.observe(document.documentElement, { attributes: true, attributeFilter: ['data-theme'] });
  return () => observer.disconnect();
}
const themeAttribute = () => document.documentElement.dataset.theme ?? '';

/** The theme <html> is drawn in now (re-renders when the toggle flips it). */
export function useThemeAttribute(): string {
  return useSyncExternalStore(subscribeThemeAttribute, themeAttribute);
}

/** A colour, with `var(--name)` resolved against the current theme (canvas cannot read CSS variables). */
export function resolveColor(color: string): string {
  const m = /^var\((--[\w-]+)\)$/.exec(color.trim());
  if (!m) return color;
  return getComputedStyle(document.documentElement).getPropertyValue(m[1]!).trim() || '#888';
}
