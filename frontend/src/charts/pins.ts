import { useSyncExternalStore } from 'react';

/**
 * A list of strings kept in localStorage that components share and follow. Pins are kept per
 * browser, not per run (W&B's habit: a workspace's pinned panels), so the keys you watch come
 * first in every run and in Compare; collapsed panel groups likewise.
 */
function storedList(storage: string) {
  const listeners = new Set<() => void>();
  let cache: { raw: string | null; items: readonly string[] } = { raw: null, items: [] };
  const read = (): readonly string[] => {
    const raw = localStorage.getItem(storage);
    if (raw !== cache.raw) {
      let items: string[] = [];
      try {
        const parsed: unknown = JSON.parse(raw ?? '[]');
        if (Array.isArray(parsed)) items = parsed.filter((k): k is string => typeof k === 'string');
      } catch {
        items = [];
      }
      cache = { raw, items };
    }
    return cache.items;
  };
  const subscribe = (fn: () => void) => {
    listeners.add(fn);
    return () => listeners.delete(fn);
  };
  return {
    use: () => useSyncExternalStore(subscribe, read),
    toggle(item: string): void {
      const items = read();
      localStorage.setItem(storage, JSON.stringify(items.includes(item) ? items.filter((k) => k !== item) : [...items, item]));
      listeners.forEach((fn) => fn());
    },
  };
}

const pinned = storedList('rlplane.pinnedCharts');
const collapsed = storedList('rlplane.collapsedPanels');

/** Pinned metric keys, in the order they were pinned. */
export const usePins = () => pinned.use();
export const togglePin = (key: string) => pinned.toggle(key);
/** Titles of the panel groups the user folded away. */
export const useCollapsed = () => collapsed.use();
export const toggleCollapsed = (title: string) => collapsed.toggle(title);
