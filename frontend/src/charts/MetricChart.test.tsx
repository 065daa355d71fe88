import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { act, cleanup, render, screen } from '@testing-library/react';
import type { Series } from '../api/types';
import { MetricChart } from './MetricChart';
import { MetricStore } from './store';
import { asColumns, live } from './testSeries';

// jsdom has no canvas: a stand-in uPlot records what the chart asks of it.
const plots: FakePlot[] = [];
class FakePlot {
  scales = { x: { min: 0 as number | undefined, max: 0 as number | undefined } };
  select = { width: 0 };
  over = document.createElement('div');
  bbox = { left: 0, top: 0, width: 0, height: 0 };
  width = 400;
  ctx = { canvas: { width: 400 } };
  calls: Array<[string, unknown, unknown?]> = [];
  destroyed = false;
  constructor(
    readonly opts: { series: Array<{ label?: string; stroke?: string }>; hooks: { setSelect: Array<(u: FakePlot) => void> } },
    public data: number[][],
  ) {
    this.autoscale();
    plots.push(this);
  }
  private autoscale() {
    this.scales.x = { min: this.data[0]?.[0], max: this.data[0]?.at(-1) };
  }
  setData(data: number[][], reset?: boolean) {
    this.calls.push(['setData', data[0]?.length, reset]);
    this.data = data;
    if (reset !== false) this.autoscale();
  }
  setScale(key: string, range: { min: number; max: number }) {
    this.calls.push(['setScale', key, range]);
    this.scales.x = { ...range };
  }
  setSize() {}
  destroy() {
    this.destroyed = true;
  }
  /** What a drag across the plot does: uPlot fires setSelect, then zooms. */
  drag(min: number, max: number) {
    this.select.width = 50;
    this.opts.hooks.setSelect.forEach((fn) => fn(this));
    this.setScale('x', { min, max });
  }
}
vi.mock('uplot', () => ({ default: function Plot(opts: never, data: never) { return new FakePlot(opts, data); } }));

type Value = Series['points'][number]['value'];
const series = (key: string, steps: number[], value: (s: number) => Value = (s) => s % 7): Series => ({
  key, total_points: steps.length, downsampled: false,
  points: steps.map((step) => {
    const v = value(step);
    return { step, value: v, min: typeof v === 'number' ? v : null, max: typeof v === 'number' ? v : null, count: 1, time: step, first_nan_step: v === 'NaN' ? step : null };
  }),
});
const range = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

function setup(history: Series) {
  const store = new MetricStore(async () => [asColumns(history)]);
  store.setKeyList([{ key: history.key, count: history.points.length, last_step: history.points.at(-1)!.step, last_value: 0, last_time: 0 }]);
  render(<MetricChart source={store} metricKey={history.key} smoothing={0.6} logScale={false} xBy="step" />);
  return store;
}

beforeEach(() => {
  plots.length = 0;
  vi.stubGlobal('ResizeObserver', class { observe() {} disconnect() {} });
  document.documentElement.dataset.theme = 'light';
});
afterEach(() => vi.unstubAllGlobals());

describe('MetricChart', () => {
  it('keeps a drag-zoom when a live point arrives, and follows new points when not zoomed', async () => {
    const store = setup(series('train/loss', range(100)));
    await vi.waitFor(() => expect(plots.at(-1)?.data[0]).toHaveLength(100));
    const plot = plots.at(-1)!;
    act(() => store.append([live('train/loss', 101)]));
    expect(plot.calls.at(-1)).toEqual(['setData', 101, undefined]); // not zoomed: scales follow the data
    plot.drag(20, 40);
    act(() => store.append([live('train/loss', 102)]));
    expect(plot.calls.slice(-2)).toEqual([['setData', 102, false], ['setScale', 'x', { min: 20, max: 40 }]]);
    expect(plot.scales.x).toEqual({ min: 20, max: 40 });
    act(() => void plot.over.dispatchEvent(new MouseEvent('dblclick')));
    act(() => store.append([live('train/loss', 103)]));
    expect(plot.calls.at(-1)).toEqual(['setData', 103, undefined]);
  });

  it('is rebuilt in the new theme when the toggle flips it, keeping the zoom', async () => {
    setup(series('train/loss', range(100)));
    await vi.waitFor(() => expect(plots.at(-1)?.data[0]).toHaveLength(100));
    const light = plots.at(-1)!;
    light.drag(10, 30);
    const stroke = vi.spyOn(window, 'getComputedStyle');
    await act(async () => {
      document.documentElement.dataset.theme = 'dark';
      await new Promise((r) => setTimeout(r, 0)); // the attribute observer reports asynchronously
    });
    const dark = plots.at(-1)!;
    expect(dark).not.toBe(light);
    expect(light.destroyed).toBe(true);
    expect(stroke).toHaveBeenCalled(); // colours resolved again, against the new theme
    expect(dark.scales.x).toEqual({ min: 10, max: 30 });
    expect(screen.getByText('train/loss').closest('figure')!.querySelector('[data-chart]')!.getAttribute('data-theme')).toBe('dark');
  });

  it('draws a sparse key raw only and says where a series went NaN', async () => {
    setup(series('eval/loss', [0, 250, 500, 750], (s) => (s >= 500 ? 'NaN' : 1)));
    expect((await screen.findByRole('note')).textContent).toBe('NaN from step 500');
    expect(plots).toHaveLength(1); // built once, before its history came, for the lines the key list promised
    expect(plots[0]!.opts.series.map((s) => s.label)).toEqual(['step', 'value']);
    expect(plots[0]!.data[0]).toEqual([0, 250, 500, 750]);
  });

  it("titles an accuracy with how its answers were drawn, and nothing else with it", () => {
    const chart = (key: string, decoding: string | null) => {
      const store = new MetricStore(async () => [asColumns(series(key, range(3)))]);
      store.setKeyList([{ key, count: 3, last_step: 3, last_value: 0, last_time: 0 }]);
      const { container } = render(<MetricChart source={store} metricKey={key} smoothing={0} logScale={false} xBy="step" decoding={decoding} />);
      return container.querySelector('.chart-key')!;
    };
    expect(chart('eval/accuracy', 'greedy').textContent).toBe('eval/accuracy greedy');
    const sampled = chart('eval/pass@8', 'sampled at T=1, 8 per prompt');
    expect(sampled.textContent).toBe('eval/pass@8 T=1 ×8');
    expect(sampled.querySelector('.decoding')!.getAttribute('title')).toBe('answers drawn: sampled at T=1, 8 per prompt');
    expect(chart('eval/reward', 'greedy').textContent).toBe('eval/reward');
    expect(chart('eval/accuracy', null).textContent).toBe('eval/accuracy');
  });

  it("titles a known key with its meaning and leaves an unknown key's title bare", () => {
    setup(series('grpo/entropy', range(10)));
    const meaning = screen.getByRole('button', { name: 'About grpo/entropy' });
    expect(screen.getByRole('tooltip', { hidden: true }).textContent).toMatch(/collapse toward 0 means the policy stopped exploring/);
    expect(meaning.getAttribute('aria-describedby')).toBe(screen.getByRole('tooltip', { hidden: true }).id);
    expect(screen.getByText('grpo/entropy').getAttribute('title')).toMatch(/^Mean entropy of the next-token distribution/);
    cleanup();
    setup(series('custom/thing', range(10)));
    expect(screen.getByText('custom/thing').getAttribute('title')).toBeNull();
    expect(screen.queryByRole('tooltip', { hidden: true })).toBeNull();
    expect(screen.queryByRole('button')).toBeNull();
  });
});
