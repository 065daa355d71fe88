import { describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, within } from '@testing-library/react';
import { useState, type ReactNode } from 'react';
import { ChartPanels, PAGE } from './ChartPanels';
import { METRIC_MEANINGS } from './metricMeanings';
import type { ChartSource, KeyInfo } from './source';

// The chart itself is covered in MetricChart.test.tsx; here it is a labelled box with the real title.
vi.mock('./MetricChart', async () => {
  const { MetricTitle } = await import('./MetricTitle');
  return {
    MetricChart: ({ metricKey, same, actions, decoding }: { metricKey: string; same?: string[]; actions?: ReactNode; decoding?: string | null }) => (
      <figure>
        <figcaption>
          <MetricTitle metricKey={metricKey} decoding={decoding} />
          {same && <span>= {same.join(' = ')} (same values)</span>}
          {actions}
        </figcaption>
        <div data-chart={metricKey} />
      </figure>
    ),
  };
});

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
    expect(within(reward).getByText('= reward/arithmetic (same values)')).toBeTruthy();
  });

  it("hands the run's decoding to its charts: an accuracy's title says it, other keys' do not", () => {
    const keys = ['eval/accuracy', 'eval/pass@8', 'eval/reward'].map(info);
    render(
      <ChartPanels source={source} keys={keys} duplicates={new Map()} search="" onSearch={() => {}} smoothing={0} logScale={false} xBy="step"
        decoding="sampled at T=1, 8 per prompt" />,
    );
    const title = (key: string) => document.querySelector(`[data-chart="${key}"]`)!.closest('figure')!.querySelector('.chart-key')!.textContent;
    expect(['eval/accuracy', 'eval/pass@8', 'eval/reward'].map(title)).toEqual(['eval/accuracy T=1 ×8', 'eval/pass@8 T=1 ×8', 'eval/reward']);
  });
});

describe('RL health panels', () => {
  const GRPO = ['reward/mean', 'grpo/kl', 'grpo/clipfrac', 'grpo/clipfrac_high', 'grpo/ratio_mean', 'grpo/entropy', 'gen/truncated',
    'grpo/zero_std_groups', 'custom/thing'].map(info);
  const renderRun = (keys: KeyInfo[]) =>
    render(<ChartPanels source={source} keys={keys} duplicates={new Map()} search="" onSearch={() => {}} smoothing={0.6} logScale={false} xBy="step" />);
  const figure = (key: string) => document.querySelector(`[data-chart="${key}"]`)!.closest('figure')!;

  it("shows a GRPO run's health signals together, in their panels", () => {
    renderRun(GRPO);
    expect(screen.getAllByRole('region').map((r) => r.getAttribute('aria-label'))).toEqual(
      ['Reward', 'KL', 'Clipping & ratio', 'Entropy & length', 'Groups', 'Other']);
    expect(charts(screen.getByRole('region', { name: 'Clipping & ratio' }))).toEqual(['grpo/clipfrac', 'grpo/clipfrac_high', 'grpo/ratio_mean']);
    expect(charts(screen.getByRole('region', { name: 'Entropy & length' }))).toEqual(['gen/truncated', 'grpo/entropy']);
    expect(charts(screen.getByRole('region', { name: 'Groups' }))).toEqual(['grpo/zero_std_groups']);
  });

  it("gives a known key's chart its meaning: the title's tooltip and an info button described by it", () => {
    renderRun(GRPO);
    const groups = within(figure('grpo/zero_std_groups'));
    const meaning = 'Share of answers in groups whose rewards were all equal: they teach nothing. High means the task is too easy or too hard for the policy.';
    expect(groups.getByTitle(meaning).textContent).toBe('grpo/zero_std_groups');
    const button = groups.getByRole('button', { name: 'About grpo/zero_std_groups', description: meaning });
    const tooltip = groups.getByRole('tooltip', { hidden: true });
    expect(button.getAttribute('aria-describedby')).toBe(tooltip.id);
    expect(tooltip.textContent).toBe(meaning);
    const clip = within(figure('grpo/clipfrac_high'));
    expect(clip.getByRole('button', { name: 'About grpo/clipfrac_high', description: METRIC_MEANINGS['grpo/clipfrac_high'] })).toBeTruthy();
    expect(clip.getByTitle(/DAPO's clip-higher raises this limit/).textContent).toBe('grpo/clipfrac_high');
  });

  it('gives a key the table does not explain no tooltip', () => {
    renderRun(GRPO);
    const other = figure('custom/thing');
    expect(within(other).queryByRole('button', { name: /About/ })).toBeNull();
    expect(within(other).queryByRole('tooltip', { hidden: true })).toBeNull();
    expect(other.querySelector('[title]:not(button)')).toBeNull(); // the pin's title is its action, not a meaning
    expect(screen.getAllByRole('tooltip', { hidden: true })).toHaveLength(GRPO.length - 1);
  });
});
