import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import type { Sample } from '../../api/types';
import { json, runDetail, sample } from '../../test/fixtures';
import { renderTab } from '../../test/renderTab';
import { SamplesTab } from './SamplesTab';

/** A stand-in for the samples API over a fixed list of samples (filters and sorts as the server does). */
function serve(all: Sample[]) {
  vi.stubGlobal('fetch', vi.fn(async (req: Request) => {
    const url = new URL(req.url);
    const q = url.searchParams;
    if (url.pathname.endsWith('/samples/prompts')) {
      const hashes = [...new Set(all.map((s) => s.prompt_hash))];
      const data = hashes.map((h) => {
        const of = all.filter((s) => s.prompt_hash === h);
        return { prompt_hash: h, prompt: of[0]!.prompt, samples: of.length, first_step: of[0]!.step, last_step: of.at(-1)!.step };
      });
      return json({ data, count: data.length });
    }
    let rows = all.filter(
      (s) =>
        (!q.has('step') || s.step === Number(q.get('step'))) &&
        (!q.has('step_min') || s.step >= Number(q.get('step_min'))) &&
        (!q.has('step_max') || s.step <= Number(q.get('step_max'))) &&
        (!q.has('prompt_hash') || s.prompt_hash === q.get('prompt_hash')),
    );
    const sort = q.get('sort') ?? 'step';
    const value = (s: Sample) => (sort.endsWith('reward') ? (typeof s.reward === 'number' ? s.reward : -Infinity) : s.step);
    rows = [...rows].sort((a, b) => (sort.startsWith('-') ? value(b) - value(a) : value(a) - value(b)) || a.step - b.step || a.index - b.index);
    return json({ data: rows.slice(0, Number(q.get('limit') ?? 100)), count: rows.length });
  }));
}

const grpoStep = (step: number) =>
  ['2+2=', '3+5='].flatMap((prompt, p) =>
    [0, 1, 2].map((i) =>
      sample({
        step, index: p * 3 + i, prompt, response: `answer ${step}.${p}.${i}`, reward: i === 0 ? 1 : 0, kl: 0.01,
        scores: { 'reward/arithmetic': i === 0 ? 1 : 0, advantage: i === 0 ? 1.15 : -0.58, length: 3 + i, truncated: 0 },
      }),
    ),
  );

afterEach(() => vi.unstubAllGlobals());

describe('SamplesTab', () => {
  it("shows the latest step's samples as groups: the prompt once, each response with its reward, components, advantage, length and KL", async () => {
    serve([...grpoStep(10), ...grpoStep(20)]);
    renderTab(<SamplesTab />, runDetail({ algorithm: 'grpo', status: 'running' }));
    const groups = await screen.findAllByRole('region', { name: 'Prompt at step 20' });
    expect(groups).toHaveLength(2);
    const first = groups[0]!;
    expect(within(first).getAllByText('Prompt')).toHaveLength(1);
    expect(within(first).getByLabelText('Prompt').textContent).toBe('2+2=');
    expect(within(first).getAllByRole('article')).toHaveLength(3);
    expect(within(first).getByText('Response 1 of 3')).toBeTruthy();
    expect(within(first).getByText(/3 responses · reward mean 0.3333/)).toBeTruthy();
    const scores = within(within(first).getAllByRole('article')[0]!).getByRole('list', { name: 'Scores' });
    expect(scores.textContent).toBe('reward 1reward/arithmetic 1advantage 1.15length 3 tokensKL 0.01');
    expect((screen.getByLabelText('Step') as HTMLInputElement).value).toBe('20');
    expect(screen.getByRole('button', { name: /Next/ })).toHaveProperty('disabled', true);

    fireEvent.click(await screen.findByRole('button', { name: '‹ Previous (10)' }));
    await waitFor(() => expect(screen.getAllByRole('region', { name: 'Prompt at step 10' })).toHaveLength(2));
    expect((screen.getByLabelText('Step') as HTMLInputElement).value).toBe('10');
    expect(await screen.findByRole('button', { name: 'Next (20) ›' })).toHaveProperty('disabled', false);
  });

  it('shows a step as a table, a row per answer with each GRPO group together, and remembers the choice', async () => {
    serve(grpoStep(20));
    const first = renderTab(<SamplesTab />, runDetail({ algorithm: 'grpo', status: 'running' }));
    await screen.findAllByRole('region', { name: 'Prompt at step 20' }); // cards unless asked
    fireEvent.click(screen.getByRole('checkbox', { name: 'Sort by reward' })); // the best answers of both groups first
    fireEvent.click(screen.getByRole('radio', { name: 'Table' }));
    const table = await screen.findByRole('table');
    await waitFor(() => expect(within(table).getAllByRole('rowgroup')).toHaveLength(3)); // thead and one per group
    expect(screen.queryByRole('region', { name: 'Prompt at step 20' })).toBeNull();
    expect(within(table).getAllByRole('columnheader').map((h) => h.textContent)).toEqual(
      ['Prompt', '#', 'Answer', 'Reward', 'reward/arithmetic', 'Advantage', 'Length'],
    );
    const [, ...groups] = within(table).getAllByRole('rowgroup');
    const cells = (row: HTMLElement) => [...row.querySelectorAll('td')].map((c) => c.textContent);
    expect(groups.map((g) => within(g).getAllByRole('rowheader')[0]!.textContent)).toEqual(['2+2=', '3+5=']);
    expect(within(groups[0]!).getAllByRole('row').map(cells)).toEqual([
      ['1', 'answer 20.0.0', '1', '1', '1.15', '3'],
      ['2', 'answer 20.0.1', '0', '0', '-0.58', '4'],
      ['3', 'answer 20.0.2', '0', '0', '-0.58', '5'],
    ]);
    expect(within(groups[1]!).getAllByRole('row').map((r) => cells(r)[1])).toEqual(['answer 20.1.0', 'answer 20.1.1', 'answer 20.1.2']);

    first.unmount();
    renderTab(<SamplesTab />, runDetail({ algorithm: 'grpo', status: 'running' }));
    expect((await screen.findByRole('radio', { name: 'Table' }) as HTMLInputElement).checked).toBe(true);
    expect(await screen.findByRole('table')).toBeTruthy();
  });

  it("shows an episode turn by turn, the environment's answers set apart from the policy's turns", async () => {
    const turns = [
      { role: 'policy' as const, text: '<calc>37*48</calc>' },
      { role: 'environment' as const, text: '<result>1776</result>' },
      { role: 'policy' as const, text: '1776' },
    ];
    serve([sample({ step: 30, prompt: '37*48=', response: turns.map((t) => t.text).join(''), reward: 1, turns, scores: { turns: 2, tool_calls: 1 } })]);
    renderTab(<SamplesTab />, runDetail({ algorithm: 'grpo', status: 'succeeded' }));
    const group = await screen.findByRole('region', { name: 'Prompt at step 30' });
    const listed = within(group).getByRole('list', { name: 'Response · 2 policy turns' });
    const items = within(listed).getAllByRole('listitem');
    expect(items.map((li) => [li.getAttribute('data-role'), li.querySelector('pre')!.textContent])).toEqual(turns.map((t) => [t.role, t.text]));
    expect(items.map((li) => li.querySelector('.turn-role')!.textContent)).toEqual(['Policy', 'Environment', 'Policy']);
  });

  it('shows a preference pair side by side with its scores and margin, and a generation beside the reference answer', async () => {
    serve([
      sample({ step: 50, index: 0, prompt: 'Capital of France?', label: 'chosen', response: 'Paris', reward: 0.75, scores: { implicit_reward: 0.75, margin: 1.25 } }),
      sample({ step: 50, index: 1, prompt: 'Capital of France?', label: 'rejected', response: 'Lyon', reward: -0.5, scores: { implicit_reward: -0.5, margin: 1.25 } }),
      sample({ step: 50, index: 2, prompt: 'Capital of France?', label: 'generation', response: 'Paris, of course', reference: 'Paris' }),
    ]);
    renderTab(<SamplesTab />, runDetail({ algorithm: 'dpo', status: 'succeeded' }));
    const group = await screen.findByRole('region', { name: 'Prompt at step 50' });
    expect(within(group).getAllByText('Capital of France?')).toHaveLength(1);
    const chosen = group.querySelector('[data-label="chosen"]')!;
    const rejected = group.querySelector('[data-label="rejected"]')!;
    expect(chosen.parentElement).toBe(rejected.parentElement); // one row: side by side
    expect(chosen.textContent).toBe('implicit_reward 0.75Chosen responseParis');
    expect(rejected.textContent).toBe('implicit_reward -0.5Rejected responseLyon');
    expect(within(group).getByTestId('pair-margin').textContent).toBe('1.25');
    const generation = group.querySelector('div[data-label="generation"]')!;
    expect(generation.textContent).toBe("Model's answerParis, of courseReference answerParis");
  });

  it("follows a prompt across steps: the prompt once, then a card per step", async () => {
    serve([...grpoStep(10), ...grpoStep(20)]);
    renderTab(<SamplesTab />, runDetail({ algorithm: 'grpo' }));
    await screen.findAllByRole('region', { name: 'Prompt at step 20' });
    const select = screen.getByLabelText('Follow a prompt') as HTMLSelectElement;
    await waitFor(() => expect(select.options.length).toBe(3));
    fireEvent.change(select, { target: { value: select.options[1]!.value } });
    const cards = await screen.findAllByRole('region', { name: /^Step \d+$/ });
    expect(cards.map((c) => c.dataset.step)).toEqual(['10', '20']);
    expect(cards[0]!.parentElement!.className).toBe('step-cards');
    expect(screen.getByLabelText('Prompt').textContent).toBe('2+2=');
    expect(screen.getAllByText('2+2=')).toHaveLength(1);
    expect(within(cards[1]!).getAllByRole('article')).toHaveLength(3);
  });

  it('says a finished run logged no samples, and a running or queued one that they may still come', async () => {
    serve([]);
    const { unmount } = renderTab(<SamplesTab />, runDetail({ status: 'cancelled' }));
    const ended = await screen.findByTestId('no-samples');
    expect(ended.textContent).toMatch(/^This run ended without logging any samples/);
    expect(ended.textContent).not.toContain('yet');
    unmount();
    for (const status of ['running', 'queued'] as const) {
      const { unmount: next } = renderTab(<SamplesTab />, runDetail({ status }));
      expect((await screen.findByTestId('no-samples')).textContent).toMatch(/^No samples yet/);
      next();
    }
  });
});
