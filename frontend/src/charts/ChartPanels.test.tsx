import { describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { useState, type ReactNode } from 'react';
import { ChartPanels, PAGE } from './ChartPanels';
import type { ChartSource, KeyInfo } from './source';

// The chart itself is covered in MetricChart.test.tsx; here it is a labelled box.
vi.mock('./MetricChart', () => ({
  MetricChart: ({ metricKey, same, actions }: { metricKey: string; same?: string[]; actions?: ReactNode }) => (
    <figure>
      <figcaption>
        {metricKey}
        {same && ` = ${same.join(' = ')} (same values)`}
        {actions}
      </figcaption>
      <div data-chart={metricKey} />
    </figure>
  ),
}));

const source: ChartSource = { lines: () => [], loaded: () => false, request: vi.fn(), subscribe: () => () => {} };
const info = (key: string): KeyInfo => ({ key, points: 10, signature: key });
const KEYS = ['reward/mean', 'reward/arithmetic', 'train/loss', ...Array.from({ length: 2000 }, (_, i) => `layers/${i}/norm`)].map(info);

function Panels({ duplicates = new Map<string, string>() }: { duplicates?: Map<string, string> }) {
  const [search, setSearch] = useState('');
  return (
    <ChartPanels source={source} keys={KEYS} duplicates={duplicates} search={search} onSearch={setSearch} smoothing={0.6} logScale={false} xBy="step" />
  );
}
const charts = (root: HTMLElement = document.body) => [...root.querySelectorAll('[data-chart]')].map((e) => e.getAttribute('data-chart'));

describe('ChartPanels', () => {
  it('lays out a page of charts per group, not 2,000 at once, and shows more on demand', () => {
    render(<Panels />);
    const other = screen.getByRole('region', { name: 'Other' });
    expect(charts(other)).toHaveLength(PAGE);
    fireEvent.click(within(other).getByRole('button', { name: /Show \d+ more of 1976/ }));
    expect(charts(other)).toHaveLength(PAGE * 5);
    expect(screen.getByText('2003 keys')).toBeTruthy();
  });

  it('filters keys with the search box', () => {
    render(<Panels />);
    fireEvent.change(screen.getByLabelText('Search keys'), { target: { value: 'layers/199 NORM' } });
    expect(charts()).toEqual(['layers/199/norm', 'layers/1990/norm', 'layers/1991/norm', 'layers/1992/norm', 'layers/1993/norm',
      'layers/1994/norm', 'layers/1995/norm', 'layers/1996/norm', 'layers/1997/norm', 'layers/1998/norm', 'layers/1999/norm']);
    expect(screen.getByText('11 of 2003 keys')).toBeTruthy();
  });

  it('puts pinned charts first, remembered across pages, and folds groups away', () => {
    const { unmount } = render(<Panels />);
    fireEvent.click(screen.getByRole('button', { name: 'Pin train/loss' }));
    unmount();
    render(<Panels />);
    const pinned = screen.getByRole('region', { name: 'Pinned' });
    expect(charts(pinned)).toEqual(['train/loss']);
    expect(screen.getAllByRole('region')[0]).toBe(pinned);
    expect(within(pinned).getByRole('button', { name: 'Unpin train/loss' }).getAttribute('aria-pressed')).toBe('true');
    const reward = screen.getByRole('region', { name: 'Reward' });
    fireEvent.click(within(reward).getByRole('button', { name: /Reward/ }));
    expect(charts(reward)).toEqual([]);
    expect(within(reward).getByRole('button', { name: /Reward/ }).getAttribute('aria-expanded')).toBe('false');
  });

  it('draws an identical series once, on the chart of the key read first', () => {
    render(<Panels duplicates={new Map([['reward/arithmetic', 'reward/mean']])} />);
    const reward = screen.getByRole('region', { name: 'Reward' });
    expect(charts(reward)).toEqual(['reward/mean']);
    expect(within(reward).getByText('reward/mean = reward/arithmetic (same values)', { exact: false })).toBeTruthy();
  });
});
