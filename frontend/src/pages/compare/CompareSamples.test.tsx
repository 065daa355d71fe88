import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, screen, within } from '@testing-library/react';
import type { RunSamplesAt, Sample } from '../../api/types';
import { json, runDetail, sample } from '../../test/fixtures';
import { renderCompareAt } from '../../test/renderCompare';

// uPlot needs a canvas; the charts view is only switched to and from here.
vi.mock('../../charts/MetricChart', () => ({ MetricChart: ({ metricKey }: { metricKey: string }) => <div data-chart={metricKey} /> }));

const NAMES: Record<number, string> = { 3: 'alpha', 7: 'beta', 9: 'gamma' };
// The step of each run's best checkpoint by eval/accuracy (run 7 has none with it logged).
const BEST: Record<number, number> = { 3: 10 };

const P1 = { prompt: '2+2=', prompt_hash: 'aa11', reference: '4' };
const P2 = { prompt: 'Which answer is better?', prompt_hash: 'bb22', reference: null };
const grpo = (step: number, response: string, reward: number, truncated: number) => ({
  ...P1, step, response, reward, kl: 0.01,
  scores: { 'reward/correct': reward, 'reward/format': 1, advantage: reward ? 0.5 : -0.5, length: response.split(' ').length, truncated },
});
const SAMPLES: Record<number, Sample[]> = {
  3: [
    sample(grpo(10, 'It is four', 0, 0)),
    sample(grpo(20, 'The answer is 4.', 1, 0)),
  ],
  7: [
    sample(grpo(10, 'Maybe 22', 0, 0)),
    sample(grpo(20, 'The answer is 5, I think.', 0, 1)),
    sample({ ...P2, step: 20, index: 1, response: 'Kind and short.', reward: 0.8, label: 'chosen', scores: { margin: 0.6 } }),
    sample({ ...P2, step: 20, index: 2, response: 'Rude and long.', reward: 0.2, label: 'rejected', scores: { margin: 0.6 } }),
  ],
  9: [],
};

/** GET /api/v1/samples as the API answers it (rlplane's api/samples/compare.py), over SAMPLES. */
function compareSamples(q: URLSearchParams) {
  const ids = q.get('runs')!.split(',').map(Number);
  const at = q.get('at') ?? 'latest';
  const hash = q.get('prompt_hash');
  const runs: RunSamplesAt[] = ids.map((id) => {
    const steps = [...new Set(SAMPLES[id]!.map((s) => s.step))].sort((a, b) => a - b);
    const base = { run_id: id, name: NAMES[id]!, algorithm: 'grpo', steps };
    if (!steps.length) return { ...base, step: null, why: 'it logged no samples' };
    if (at === 'all') return { ...base, step: null, why: null };
    if (at === 'latest') return { ...base, step: steps.at(-1)!, why: null };
    const target = at === 'step' ? Number(q.get('step')) : BEST[id];
    if (target == null) return { ...base, step: null, why: `no checkpoint of it has ${q.get('metric')} logged at its step` };
    const before = steps.filter((s) => s <= target);
    return before.length ? { ...base, step: before.at(-1)!, why: null } : { ...base, step: null, why: `no samples at or before step ${target}` };
  });
  const below = q.get('reward_below');
  const failed = q.get('failed');
  const rows = runs.flatMap((r) =>
    SAMPLES[r.run_id]!
      .filter((s) => (at === 'all' ? s.prompt_hash === hash : s.step === r.step && (!hash || s.prompt_hash === hash)))
      .filter((s) => below == null || (typeof s.reward === 'number' && s.reward < Number(below)))
      .filter((s) => q.get('truncated') !== 'true' || s.scores.truncated === 1)
      .filter((s) => failed == null || Number(s.scores[failed]) <= 0)
      .map((s) => ({ run: r.run_id, s })),
  );
  const prompts = new Map<string, { prompt_hash: string; prompt: string; reference: string | null; samples: Record<string, Sample[]> }>();
  for (const { run, s } of rows) {
    const p = prompts.get(s.prompt_hash) ?? { prompt_hash: s.prompt_hash, prompt: s.prompt, reference: s.reference, samples: {} };
    (p.samples[run] ??= []).push(s);
    prompts.set(s.prompt_hash, p);
  }
  const sorted = [...prompts.values()].sort((a, b) => Object.keys(b.samples).length - Object.keys(a.samples).length || a.prompt.localeCompare(b.prompt));
  return { runs, prompts: sorted.slice(0, Number(q.get('limit') ?? 50)), count: sorted.length };
}

/** The fake API; returns the queries of every GET /api/v1/samples, and fails the test on a per-run samples request. */
function stubApi() {
  const calls: URLSearchParams[] = [];
  vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
    const url = new URL(req.url);
    if (url.pathname === '/api/v1/samples') {
      calls.push(url.searchParams);
      return json(compareSamples(url.searchParams));
    }
    if (url.pathname === '/api/v1/compare') {
      // The page's poll: every run's detail and (empty) key list in one request.
      const ids = url.searchParams.get('runs')!.split(',').map(Number);
      const keys = { cursor: '0:-1', full: true, count: 0, data: [] };
      const one = (id: number) =>
        NAMES[id]
          ? { id, run: runDetail({ id, name: NAMES[id], algorithm: 'grpo', status: 'succeeded' }), error: null, keys }
          : { id, run: null, error: { status: 404, detail: 'Run not found' }, keys: null };
      return json({ runs: ids.map(one) });
    }
    return json({ detail: `unexpected ${url.pathname}` }, 404);
  }));
  return calls;
}


const where = () => new URL(screen.getByTestId('where').textContent!, 'http://x');
const asObject = (q: URLSearchParams) => Object.fromEntries(q);
const promptBlock = async (hash: string) => {
  await vi.waitFor(() => expect(document.querySelector(`[data-testid="sample-prompt"][data-prompt-hash="${hash}"]`)).toBeTruthy());
  return document.querySelector<HTMLElement>(`[data-testid="sample-prompt"][data-prompt-hash="${hash}"]`)!;
};
const column = (block: HTMLElement, run: number) => block.querySelector<HTMLElement>(`[data-testid="sample-column"][data-run="${run}"]`)!;
const scores = (answer: HTMLElement) =>
  Object.fromEntries(Array.from(answer.querySelectorAll<HTMLElement>('[data-score]'), (li) => [li.dataset.score, li.querySelector('.num')!.textContent]));
const settle = () => vi.waitFor(() => expect(screen.getByTestId('compare-samples').getAttribute('aria-busy')).toBe('false'));
const enter = (input: HTMLElement, value: string) => {
  fireEvent.change(input, { target: { value } });
  fireEvent.keyDown(input, { key: 'Enter' });
};

afterEach(() => vi.unstubAllGlobals());

describe('Compare: Samples view', () => {
  it('switches between charts and samples, keeping the rest of the URL', async () => {
    stubApi();
    const client = renderCompareAt('/compare?runs=3,7&smooth=0');
    const views = screen.getByRole('navigation', { name: 'Compare views' });
    expect(within(views).getByRole('link', { name: 'Charts' }).getAttribute('aria-current')).toBe('page');
    expect(screen.queryByTestId('compare-samples')).toBeNull();
    fireEvent.click(within(views).getByRole('link', { name: 'Samples' }));
    expect(screen.getByTestId('where').textContent).toBe('/compare?runs=3,7&smooth=0&view=samples');
    expect(screen.getByTestId('compare-samples')).toBeTruthy();
    expect(screen.queryByLabelText('Smoothing')).toBeNull();
    fireEvent.click(within(views).getByRole('link', { name: 'Charts' }));
    expect(screen.getByTestId('where').textContent).toBe('/compare?runs=3,7&smooth=0');
    expect(screen.queryByTestId('compare-samples')).toBeNull();
    client.clear();
  });

  it("asks once for all the runs, then shows each prompt with a column per run: answers, rewards, components, a run's why", async () => {
    const calls = stubApi();
    const client = renderCompareAt('/compare?runs=3,7,9&view=samples');
    const first = await promptBlock('aa11');
    await settle();
    expect(calls.map(asObject)).toEqual([{ runs: '3,7,9', at: 'latest', limit: '50' }]);
    const fetched = vi.mocked(fetch).mock.calls.map(([req]) => new URL((req as Request).url).pathname);
    expect(fetched.filter((p) => p.includes('samples'))).toEqual(['/api/v1/samples']);

    // Most runs first: the prompt both runs answered, then the pair only run 7 has.
    expect(Array.from(document.querySelectorAll<HTMLElement>('[data-testid="sample-prompt"]'), (b) => b.dataset.promptHash)).toEqual(['aa11', 'bb22']);
    expect(within(first).getByText('2+2=')).toBeTruthy();
    expect(within(first).getByText('Reference answer').nextElementSibling?.textContent).toBe('4');
    expect(Array.from(first.querySelectorAll<HTMLElement>('[data-testid="sample-column"]'), (c) => c.dataset.run)).toEqual(['3', '7', '9']);

    const a3 = within(column(first, 3)).getByTestId('sample-answer');
    expect(column(first, 3).getAttribute('aria-label')).toBe('#3 alpha');
    expect(within(column(first, 3)).getByText('step 20')).toBeTruthy();
    expect(a3.querySelector('pre.response')!.textContent).toBe('The answer is 4.');
    expect(scores(a3)).toEqual({ reward: '1', 'reward/correct': '1', 'reward/format': '1', advantage: '0.5', length: '4', KL: '0.01' });
    expect(a3.dataset.truncated).toBeUndefined();

    const a7 = within(column(first, 7)).getByTestId('sample-answer');
    expect(a7.querySelector('pre.response')!.textContent).toBe('The answer is 5, I think.');
    expect(scores(a7)).toMatchObject({ reward: '0', 'reward/correct': '0', advantage: '-0.5' });
    expect(a7.querySelector('[data-score="reward/correct"]')!.className).toBe('score-failed');
    expect(within(a7).getByText('truncated')).toBeTruthy();
    expect(a7.dataset.truncated).toBe('true');

    expect(within(column(first, 9)).getByTestId('run-why').textContent).toBe('it logged no samples');
    const shown = screen.getByRole('list', { name: 'Shown steps' });
    expect(Array.from(within(shown).getAllByRole('listitem'), (li) => li.textContent)).toEqual(['#3 alpha step 20', '#7 beta step 20', '#9 gamma it logged no samples']);
    expect((shown.querySelector('[data-run="7"] .swatch') as HTMLElement).style.background).toBe('var(--series-1)');

    const pair = await promptBlock('bb22');
    expect(within(column(pair, 3)).getByText('No answer to this prompt at step 20.')).toBeTruthy();
    const sides = within(column(pair, 7)).getAllByTestId('sample-answer');
    expect(sides.map((s) => s.dataset.label)).toEqual(['chosen', 'rejected']);
    expect(within(sides[0]!).getByText('chosen')).toBeTruthy();
    expect(scores(sides[1]!)).toEqual({ reward: '0.2', margin: '0.6' });
    expect(within(pair).getByText(/2 answers · reward mean 0.5/)).toBeTruthy();
    client.clear();
  });

  it('keeps at, step, metric and the filters in the URL and sends them in the one request', async () => {
    const calls = stubApi();
    const client = renderCompareAt('/compare?runs=3,7&view=samples');
    await promptBlock('aa11');

    fireEvent.click(screen.getByRole('radio', { name: 'Best checkpoint by' }));
    expect(where().searchParams.get('at')).toBe('best');
    expect(screen.getByText(/Enter a metric/)).toBeTruthy();
    enter(screen.getByLabelText('Metric'), 'eval/accuracy');
    fireEvent.change(screen.getByLabelText('Best is'), { target: { value: 'min' } });
    expect(where().search).toBe('?runs=3,7&view=samples&at=best&metric=eval/accuracy&mode=min');
    await vi.waitFor(() => expect(asObject(calls.at(-1)!)).toEqual({ runs: '3,7', at: 'best', metric: 'eval/accuracy', mode: 'min', limit: '50' }));
    await settle();
    const block = await promptBlock('aa11');
    expect(within(column(block, 3)).getByText('step 10')).toBeTruthy();
    expect(within(column(block, 7)).getByTestId('run-why').textContent).toBe('no checkpoint of it has eval/accuracy logged at its step');

    const step = screen.getByLabelText('Step');
    fireEvent.change(step, { target: { value: '15' } });
    fireEvent.blur(step);
    expect(where().searchParams.get('at')).toBe('step');
    await vi.waitFor(() => expect(asObject(calls.at(-1)!)).toEqual({ runs: '3,7', at: 'step', step: '15', limit: '50' }));

    enter(screen.getByLabelText('with reward below'), '0.5');
    fireEvent.click(screen.getByRole('checkbox', { name: 'truncated' }));
    enter(screen.getByLabelText('failing'), 'reward/correct');
    expect(asObject(where().searchParams)).toMatchObject({ reward_below: '0.5', truncated: '1', failed: 'reward/correct' });
    await vi.waitFor(() =>
      expect(asObject(calls.at(-1)!)).toEqual({ runs: '3,7', at: 'step', step: '15', reward_below: '0.5', truncated: 'true', failed: 'reward/correct', limit: '50' }),
    );
    expect(await screen.findByText('No answers match these filters.')).toBeTruthy();
    expect(calls.every((q) => q.get('runs') === '3,7')).toBe(true);
    client.clear();
  });

  it("follows a prompt: at=all with its hash, each run's answers by step, and Back returns to the view it left", async () => {
    const calls = stubApi();
    const client = renderCompareAt('/compare?runs=3,7,9&view=samples&at=best&metric=eval/accuracy');
    const block = await promptBlock('aa11');
    fireEvent.click(within(block).getByTestId('follow-prompt'));
    expect(asObject(where().searchParams)).toMatchObject({ at: 'all', prompt_hash: 'aa11', metric: 'eval/accuracy' });
    await vi.waitFor(() => expect(asObject(calls.at(-1)!)).toEqual({ runs: '3,7,9', at: 'all', prompt_hash: 'aa11', limit: '50' }));
    await settle();
    const followed = await promptBlock('aa11');
    expect(document.querySelectorAll('[data-testid="sample-prompt"]')).toHaveLength(1);
    expect(within(followed).queryByTestId('follow-prompt')).toBeNull();
    const steps = (run: number) => Array.from(column(followed, run).querySelectorAll<HTMLElement>('section[data-step]'), (s) => s.getAttribute('aria-label'));
    expect(steps(3)).toEqual(['Step 10', 'Step 20']);
    expect(steps(7)).toEqual(['Step 10', 'Step 20']);
    expect(within(column(followed, 3)).getByRole('region', { name: 'Step 10' }).querySelector('pre.response')!.textContent).toBe('It is four');
    expect(within(column(followed, 9)).getByTestId('run-why').textContent).toBe('it logged no samples');
    expect(within(screen.getByTestId('samples-at')).getByRole('radio', { name: 'Latest' }).matches(':disabled')).toBe(true);

    fireEvent.click(screen.getByTestId('samples-back'));
    expect(where().search).toBe('?runs=3,7,9&view=samples&at=best&metric=eval/accuracy');
    await vi.waitFor(() => expect(calls.at(-1)!.get('at')).toBe('best'));
    client.clear();
  });

  it('diffs two picked answers word by word, at most two at a time', async () => {
    stubApi();
    const client = renderCompareAt('/compare?runs=3,7&view=samples');
    const block = await promptBlock('aa11');
    await settle();
    fireEvent.click(within(column(block, 3)).getByRole('checkbox', { name: 'Diff answer 0 of run 3 at step 20' }));
    expect(within(screen.getByTestId('sample-diff')).getByText(/pick one more answer/)).toBeTruthy();
    fireEvent.click(within(column(block, 7)).getByRole('checkbox', { name: /of run 7 at step 20/ }));

    const diff = screen.getByRole('region', { name: 'Diff of two answers' });
    const output = within(diff).getByTestId('diff-output');
    expect(output.textContent).toBe('The answer is 45, I think.');
    expect(Array.from(output.querySelectorAll('del'), (d) => d.textContent)).toEqual(['4']);
    expect(Array.from(output.querySelectorAll('ins'), (d) => d.textContent)).toEqual(['5, I think']);
    expect(within(diff).getByTestId('diff-counts').textContent).toBe('1 removed, 4 added');
    expect(within(diff).getByTestId('diff-from').textContent).toBe('− #3 alpha · step 20 · answer 0');
    expect(within(diff).getByTestId('diff-to').textContent).toBe('+ #7 beta · step 20 · answer 0');

    // A third answer waits until one of the two is unpicked.
    const pair = await promptBlock('bb22');
    const third = within(column(pair, 7)).getAllByRole('checkbox')[0]!;
    expect(third).toHaveProperty('disabled', true);
    fireEvent.click(within(diff).getByRole('button', { name: 'Clear' }));
    expect(screen.queryByTestId('sample-diff')).toBeNull();
    expect(third).toHaveProperty('disabled', false);
    client.clear();
  });
});
