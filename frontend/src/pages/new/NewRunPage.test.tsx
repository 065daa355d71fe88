import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor } from '@testing-library/react';
import { Link, MemoryRouter, Route, Routes, useLocation } from 'react-router';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { parse } from 'yaml';
import { SubmitWarnings } from '../run/SubmitWarnings';
import { NewRunPage } from './NewRunPage';

function Where() {
  return <output data-testid="where">{useLocation().pathname}</output>;
}

const urlOf = (input: Request | string) => (typeof input === 'string' ? input : input.url);

const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });

function renderAt(url: string) {
  render(
    <QueryClientProvider client={new QueryClient({ defaultOptions: { queries: { retry: false } } })}>
      <MemoryRouter initialEntries={[url]}>
        <Routes>
          <Route path="/new" element={<NewRunPage />} />
          <Route path="/runs/:id" element={<><Where /><SubmitWarnings /></>} />
          <Route path="*" element={<Where />} />
        </Routes>
      </MemoryRouter>
    </QueryClientProvider>,
  );
}

afterEach(() => vi.unstubAllGlobals());

describe('NewRunPage', () => {
  it('shows the API validation errors with their lines, and a click focuses the editor', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json({ detail: [{ loc: ['body', 'train', 'lr'], msg: 'Input should be greater than 0' }] }, 422)));
    renderAt('/new?algorithm=sft&model=run:3@40');
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    expect(editor.value).toContain('path: run:3@40');
    const problem = await screen.findByText(/Input should be greater than 0/, {}, { timeout: 3000 });
    expect(problem.textContent).toContain('train.lr');
    expect(editor.getAttribute('aria-invalid')).toBe('true');
    const lrLine = editor.value.split('\n').findIndex((l) => /^\s+lr:/.test(l)) + 1;
    fireEvent.click(screen.getByRole('button', { name: `line ${lrLine}` }));
    expect(document.activeElement).toBe(editor);
  });

  it('submits the YAML as application/yaml and opens the new run', async () => {
    const calls: Request[] = [];
    vi.stubGlobal('fetch', vi.fn(async (input: RequestInfo, init?: RequestInit) => {
      const req = new Request(new URL(String(input), 'http://x'), init);
      calls.push(req);
      if (req.url.endsWith('/validate')) return json({ valid: true, spec: {}, total_steps: 60, parents: [] });
      await created;
      return json({ id: 42 }, 201);
    }));
    let answer = () => {};
    const created = new Promise<void>((resolve) => (answer = resolve));
    renderAt('/new?algorithm=dpo');
    await screen.findByTestId('spec-valid', {}, { timeout: 3000 });
    const button = screen.getByRole('button', { name: 'Submit run' }) as HTMLButtonElement;
    fireEvent.click(button);
    await waitFor(() => expect(button.disabled).toBe(true)); // no second submit while one is in flight
    answer();
    await waitFor(() => expect(screen.getByTestId('where').textContent).toBe('/runs/42'));
    const post = calls.find((c) => new URL(c.url).pathname === '/api/v1/runs')!;
    expect(post.method).toBe('POST');
    expect(post.headers.get('Content-Type')).toBe('application/yaml');
    expect(await post.text()).toContain('algorithm: dpo');
  });

  it('clones a run: the spec as submitted (comments kept) renamed -clone, its algorithm as the template, and asks before replacing it', async () => {
    const specText = '# tuned by hand\nname: base\nalgorithm: ppo\ntrain:\n  lr: 0.001  # lower than the example\n';
    vi.stubGlobal('fetch', vi.fn(async (req: Request | string) => {
      if (urlOf(req).includes('/api/v1/runs/7')) return json({ id: 7, name: 'base', spec: { name: 'base', algorithm: 'ppo', dpo: null }, spec_text: specText });
      return json({ valid: true, spec: {}, total_steps: 1, parents: [{ run_id: 3, name: 'sft-a', field: 'model.path', step: 40 }], warnings: [] });
    }));
    renderAt('/new?clone=7');
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    await waitFor(() => expect(editor.value).toBe(specText.replace('name: base', 'name: base-clone')));
    expect(editor.value).not.toContain('dpo: null');
    expect((screen.getByLabelText('Template') as HTMLSelectElement).value).toBe('ppo');
    expect((await screen.findByTestId('spec-valid', {}, { timeout: 3000 })).textContent).toBe(
      'Valid · 1 steps · parents: #3 sft-a (model.path @40)',
    );
    const confirm = vi.fn(() => false);
    vi.stubGlobal('confirm', confirm);
    fireEvent.change(screen.getByLabelText('Template'), { target: { value: 'dpo' } });
    expect(confirm).toHaveBeenCalledOnce();
    expect(editor.value).toContain('name: base-clone');
  });

  it('starts from a checkpoint: the source run\'s spec with model.path at that step and the new name', async () => {
    vi.stubGlobal('fetch', vi.fn(async (req: Request | string) => {
      if (urlOf(req).includes('/api/v1/runs/7')) {
        return json({ id: 7, name: 'base', spec: {}, spec_text: '# mine\nname: base\nalgorithm: sft\nmodel:\n  path: builtin:tiny-gpt2  # start\n' });
      }
      return json({ valid: true, spec: {}, total_steps: 1, parents: [], warnings: [] });
    }));
    renderAt(`/new?clone=7&model=${encodeURIComponent('run:7@200')}&name=base-from-step-200`);
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    await waitFor(() =>
      expect(editor.value).toBe('# mine\nname: base-from-step-200\nalgorithm: sft\nmodel:\n  path: run:7@200  # start\n'),
    );
  });

  it('evaluates a checkpoint: the eval template on the source run\'s data with its reward, its name and project', async () => {
    const spec = {
      name: 'grpo-math', algorithm: 'grpo', model: { path: 'run:3@250', max_seq_len: 96 }, data: { source: 'dataset:12', split: 'train' },
      reward: { kind: 'builtin', name: 'arithmetic' }, resources: { queue: 'gpu', gpus: 1 }, grpo: { gen: { max_new_tokens: 24 } },
    };
    const validated: string[] = [];
    vi.stubGlobal('fetch', vi.fn(async (input: Request | string, init?: RequestInit) => {
      const req = typeof input === 'string' ? new Request(new URL(input, 'http://x'), init) : input;
      if (req.url.endsWith('/api/v1/runs/7')) return json({ id: 7, name: 'grpo-math', project: 'maths', spec, spec_text: null });
      validated.push(await req.text());
      return json({ valid: true, spec: {}, total_steps: 1, parents: [], warnings: [] });
    }));
    renderAt(`/new?algorithm=eval&from=7&model=${encodeURIComponent('run:7@200')}`);
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    await waitFor(() => expect(editor.value).toContain('name: eval-grpo-math'));
    expect(parse(editor.value)).toMatchObject({
      algorithm: 'eval', project: 'maths', model: { path: 'run:7@200', max_seq_len: 96 }, data: spec.data, reward: spec.reward,
      eval: { gen: { max_new_tokens: 24 } },
    });
    expect(editor.value).toMatch(/^# Evaluation: score a checkpoint's answers/);
    expect((screen.getByLabelText('Template') as HTMLSelectElement).value).toBe('eval');
    expect(screen.getByText('evaluating a checkpoint of run #7')).toBeTruthy();
    expect(screen.queryByText(/has no reward/)).toBeNull();
    // What the API checks is the prefilled text.
    await waitFor(() => expect(validated.at(-1)).toBe(editor.value), { timeout: 3000 });
  });

  it("evaluates an SFT run's output: the template's reward kept, and a note to choose one", async () => {
    vi.stubGlobal('fetch', vi.fn(async (req: Request | string) =>
      urlOf(req).includes('/api/v1/runs/4')
        ? json({ id: 4, name: 'sft-base', project: 'default', spec: { name: 'sft-base', algorithm: 'sft', reward: null, data: { source: 'builtin:tiny-sft' } }, spec_text: null })
        : json({ valid: true, spec: {}, total_steps: 1, parents: [], warnings: [] }),
    ));
    renderAt(`/new?algorithm=eval&from=4&model=${encodeURIComponent('run:4')}`);
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    expect(await screen.findByText("Run sft-base has no reward to reuse: choose one (the reward below is the template's).")).toBeTruthy();
    expect(parse(editor.value)).toMatchObject({
      name: 'eval-sft-base', model: { path: 'run:4' }, data: { source: 'builtin:tiny-sft' }, reward: { kind: 'builtin', name: 'arithmetic' },
    });
  });

  it('shows the warnings of a valid spec on their lines, and the submit\'s warnings on the new run', async () => {
    const warnings = [{ loc: ['train', 'lr'], msg: 'a learning rate of 1 or more is almost certainly a mistake' }];
    vi.stubGlobal('fetch', vi.fn(async (req: Request | string) => {
      if (urlOf(req).endsWith('/validate')) return json({ valid: true, spec: {}, total_steps: 5, parents: [], warnings });
      return json({ id: 42, warnings }, 201);
    }));
    renderAt('/new?algorithm=sft');
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    const list = await screen.findByRole('list', { name: 'Warnings' }, { timeout: 3000 });
    const lrLine = editor.value.split('\n').findIndex((l) => /^\s+lr:/.test(l)) + 1;
    expect(list.textContent).toBe(`line ${lrLine} train.lr — a learning rate of 1 or more is almost certainly a mistake`);
    expect(screen.getByTestId('spec-valid')).toBeTruthy();
    fireEvent.click(screen.getByRole('button', { name: 'Submit run' }));
    await waitFor(() => expect(screen.getByTestId('where').textContent).toBe('/runs/42'));
    expect(screen.getByText('Submitted with a warning:').closest('[role=status]')?.textContent).toContain('train.lr — a learning rate of 1 or more');
  });

  it("opens a template whose model is another run as a placeholder, and shows the server's answer on its line", async () => {
    const msg = "Value error, 'run:<id of your sft-arithmetic run>@250' is a template's placeholder: write the run's id in place of <id of your sft-arithmetic run>";
    vi.stubGlobal('fetch', vi.fn(async () => json({ detail: [{ loc: ['body', 'model', 'path'], msg }] }, 422)));
    renderAt('/new?algorithm=grpo');
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    expect(editor.value).not.toContain('./runs/');
    const pathLine = editor.value.split('\n').findIndex((l) => l.includes('path: run:<id of your sft-arithmetic run>@250')) + 1;
    expect(pathLine).toBeGreaterThan(0);
    const problem = await screen.findByText(/is a template's placeholder/, {}, { timeout: 3000 });
    expect(problem.textContent).toContain(`line ${pathLine} model.path`);
  });

  it('keeps ?model= (and the comments) when another template is picked', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json({ valid: true, spec: {}, total_steps: 1, parents: [] })));
    const confirm = vi.fn(() => true);
    vi.stubGlobal('confirm', confirm);
    renderAt('/new?model=run:3@40');
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    expect(editor.value).toMatch(/^# Supervised fine-tuning/);
    expect(editor.value).toContain('  path: run:3@40');
    fireEvent.change(screen.getByLabelText('Template'), { target: { value: 'ppo' } });
    expect(confirm).not.toHaveBeenCalled(); // nothing typed yet: nothing to lose
    expect(editor.value).toContain('algorithm: ppo');
    expect(editor.value).toContain('  path: run:3@40');
    expect(editor.value).toContain('# PPO (RLHF)');
  });

  it('offers the example pipelines as templates: SteerLM\'s loads as it is and is checked as a pipeline', async () => {
    const calls: string[] = [];
    vi.stubGlobal('fetch', vi.fn(async (req: Request | string) => {
      calls.push(urlOf(req));
      return json({ valid: true, stages: [{ name: 'sft', needs: [] }] });
    }));
    renderAt('/new');
    const menu = screen.getByLabelText('Template') as HTMLSelectElement;
    const pipelines = [...menu.querySelectorAll('optgroup[label="Pipelines"] option')].map((o) => o.textContent);
    expect(pipelines).toEqual(expect.arrayContaining(['steerlm pipeline', 'sft-rm-ppo pipeline']));
    fireEvent.change(menu, { target: { value: 'pipeline:steerlm' } });
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    expect(editor.value).toMatch(/^# SteerLM/);
    expect(Object.keys(parse(editor.value).stages)).toEqual(['sft', 'attributes', 'steer', 'high', 'low']);
    await waitFor(() => expect(calls.some((url) => url.endsWith('/api/v1/pipelines/validate'))).toBe(true), { timeout: 3000 });
  });

  it('starts afresh when the query changes (New run from a clone)', async () => {
    vi.stubGlobal('fetch', vi.fn(async (req: Request | string) =>
      urlOf(req).includes('/api/v1/runs/7')
        ? json({ id: 7, name: 'base', spec: {}, spec_text: 'name: base\nalgorithm: ppo\n' })
        : json({ valid: true, spec: {}, total_steps: 1, parents: [], warnings: [] }),
    ));
    render(
      <QueryClientProvider client={new QueryClient()}>
        <MemoryRouter initialEntries={['/new?clone=7']}>
          <Routes>
            <Route path="/new" element={<><Link to="/new">New run</Link><NewRunPage /></>} />
          </Routes>
        </MemoryRouter>
      </QueryClientProvider>,
    );
    const editor = () => screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    await waitFor(() => expect(editor().value).toBe('name: base-clone\nalgorithm: ppo\n'));
    fireEvent.click(screen.getByRole('link', { name: 'New run' }));
    await waitFor(() => expect(editor().value).toMatch(/^# Supervised fine-tuning/));
  });

  it('checks and submits a pipeline (a document with stages) as one, and opens it', async () => {
    const calls: string[] = [];
    vi.stubGlobal('fetch', vi.fn(async (input: RequestInfo, init?: RequestInit) => {
      const url = new URL(String(input), 'http://x').pathname;
      calls.push(`${init?.method ?? 'GET'} ${url}`);
      if (url.endsWith('/validate')) return json({ valid: true, stages: [{ name: 'sft', needs: [] }, { name: 'grpo', needs: ['sft'] }] });
      return json({ id: 7 }, 201);
    }));
    renderAt('/new');
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    fireEvent.change(editor, { target: { value: 'name: chain\nstages:\n  sft: {spec: {algorithm: sft}}\n  grpo: {spec: {algorithm: grpo}}\n' } });
    const valid = await screen.findByText(/Valid pipeline · 2 stages/, {}, { timeout: 3000 });
    expect(valid.textContent).toContain('grpo (after sft)');
    fireEvent.click(screen.getByRole('button', { name: 'Submit run' }));
    expect((await screen.findByTestId('where')).textContent).toBe('/pipelines/7');
    expect(calls.filter((c) => c.includes('/pipelines'))).toEqual(['POST /api/v1/pipelines/validate', 'POST /api/v1/pipelines']);
    expect(calls).not.toContain('POST /api/v1/runs');
  });

  it('shows a 403 without a line, and Tab indents until Escape', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => json({ detail: 'no write access to project default' }, 403)));
    renderAt('/new');
    const editor = screen.getByLabelText('Run spec (YAML)') as HTMLTextAreaElement;
    const problem = await screen.findByText('no write access to project default', {}, { timeout: 3000 });
    expect(problem.querySelector('button')).toBeNull();
    editor.focus();
    editor.setSelectionRange(0, 0);
    expect(fireEvent.keyDown(editor, { key: 'Tab' })).toBe(false); // default prevented: stays in the field
    expect(editor.value.startsWith('  # Supervised')).toBe(true);
    fireEvent.keyDown(editor, { key: 'Escape' });
    expect(fireEvent.keyDown(editor, { key: 'Tab' })).toBe(true); // the browser moves focus on
  });
});
