import { useState } from 'react';

export type SamplesView = 'cards' | 'table';

const KEY = 'rlplane.samples.view';

/**
 * Cards or table, kept in the browser like the runs list's columns: a way of reading samples,
 * the same for every run and kept across visits, not part of a shared link.
 */
export function useSamplesView(): [SamplesView, (view: SamplesView) => void] {
  const [view, setView] = useState<SamplesView>(() => (localStorage.getItem(KEY) === 'table' ? 'table' : 'cards'));
  const choose = (next: SamplesView) => {
    localStorage.setItem(KEY, next);
    setView(next);
  };
  return [view, choose];
}
