import { afterEach, describe, expect, it, vi } from 'vitest';
import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import { commandRunDetail, runDetail } from '../../../test/fixtures';
import { renderTab } from '../../../test/renderTab';
import { hasCodeTab } from '../command';
import { CodeTab } from './CodeTab';
import { environmentOf, filterPackages, shellLine } from './environment';

const SHA = 'ab12'.repeat(16);
const DIFF = 'diff --git a/train.py b/train.py\n-lr = 1e-3\n+lr = 3e-4\n';
const environment = {
  python: '3.11.9', executable: '/venv/bin/python', platform: 'Linux-6.8-x86_64', hostname: 'gpu-node-3',
  argv: ['sft.py', '--lr', '0.0001'], cwd: '/tmp/rlplane/run-7',
  packages: { accelerate: '1.2.0', torch: '2.5.1', torchvision: '0.20.1', transformers: '4.47.0', typing_extensions: '4.12.2' },
};

afterEach(() => vi.unstubAllGlobals());

describe('CodeTab: command and code', () => {
  it('shows the command as written, its env names (not values), and downloads the snapshot with the token', async () => {
    localStorage.setItem('rlplane.token', 'secret');
    const requests: Request[] = [];
    vi.stubGlobal('fetch', vi.fn(async (input: Request | string, init?: RequestInit) => {
      requests.push(typeof input === 'string' ? new Request(new URL(input, 'http://x'), init) : input);
      return new Response('tar.gz bytes', { status: 200 });
    }));
    vi.stubGlobal('URL', Object.assign(URL, { createObjectURL: vi.fn(() => 'blob:x'), revokeObjectURL: vi.fn() }));
    const clicked: string[] = [];
    const click = vi.spyOn(HTMLAnchorElement.prototype, 'click').mockImplementation(function (this: HTMLAnchorElement) {
      clicked.push(this.download);
    });

    renderTab(<CodeTab />, commandRunDetail({}, { environment }));
    expect(screen.getByLabelText('Command line').textContent).toBe(
      "python sft.py --model {command.config.model} --lr {train.lr} --note 'two words'",
    );
    expect(screen.getByTestId('env-names').textContent).toBe('HF_HOME, WANDB_MODE');
    expect(document.body.textContent).not.toContain('/cache/hf');
    expect(screen.getByText(/HuggingFaceTB\/SmolLM2-135M/)).toBeTruthy(); // command.config

    const snapshot = screen.getByTestId('code-snapshot');
    expect(snapshot.textContent).toBe(SHA.slice(0, 12));
    expect(snapshot.getAttribute('title')).toBe(SHA);
    expect(screen.getByTestId('git-commit').textContent).toBe('c0ffee12');
    expect(screen.queryByText('uncommitted changes')).toBeNull();

    fireEvent.click(screen.getByRole('button', { name: `Download code-${SHA.slice(0, 12)}.tar.gz` }));
    // A failed download shows its error instead: the assertion then prints it.
    await waitFor(() => expect(screen.queryByRole('alert')?.textContent ?? clicked).toEqual([`code-${SHA.slice(0, 12)}.tar.gz`]));
    expect(new URL(requests[0]!.url).pathname).toBe(`/api/v1/code/${SHA}`);
    expect(requests[0]!.headers.get('Authorization')).toBe('Bearer secret');
    click.mockRestore();
  });

  it('shows a shared directory, and a dirty tree with its diff folded away', () => {
    const code = { snapshot: null, path: '/shared/code/my-project', git_commit: 'deadbeefcafe', git_dirty: true, git_diff: DIFF, files: null, size: null };
    renderTab(<CodeTab />, commandRunDetail({ code }));
    expect(screen.getByTestId('code-path').textContent).toBe('/shared/code/my-project');
    expect(screen.queryByRole('button', { name: /^Download/ })).toBeNull();
    expect(screen.getByText('uncommitted changes')).toBeTruthy();
    const diff = screen.getByLabelText('Code: uncommitted diff');
    expect(diff.textContent).toBe(DIFF);
    const details = diff.closest('details')!;
    expect(details.open).toBe(false);
    expect(within(details.querySelector('summary')!).getByText('(4 lines)')).toBeTruthy();
  });
});

describe('CodeTab: environment', () => {
  it('shows where the script ran and filters its packages by name, with a count', () => {
    renderTab(<CodeTab />, commandRunDetail({}, { environment }));
    const env = screen.getByLabelText('Where it ran');
    expect(within(env).getByText('3.11.9').getAttribute('title')).toBe('/venv/bin/python');
    expect(within(env).getByText('gpu-node-3')).toBeTruthy();
    expect(within(env).getByText('Linux-6.8-x86_64')).toBeTruthy();
    expect(within(env).getByText('/tmp/rlplane/run-7')).toBeTruthy();
    expect(within(env).getByText('sft.py --lr 0.0001')).toBeTruthy();

    const table = screen.getByRole('table', { name: 'Installed packages' });
    const names = () => within(table).getAllByRole('row').slice(1).map((r) => r.textContent);
    expect(names()).toHaveLength(5);
    expect(screen.getByTestId('package-count').textContent).toBe('5 packages');
    fireEvent.change(screen.getByLabelText('Filter packages'), { target: { value: 'TORCH' } });
    expect(names()).toEqual(['torch2.5.1', 'torchvision0.20.1']);
    expect(screen.getByTestId('package-count').textContent).toBe('2 of 5 packages');
    fireEvent.change(screen.getByLabelText('Filter packages'), { target: { value: 'typing-ext' } });
    expect(names()).toEqual(['typing_extensions4.12.2']);
    fireEvent.change(screen.getByLabelText('Filter packages'), { target: { value: 'nothing-like-it' } });
    expect(names()).toEqual([]);
    expect(screen.getByTestId('package-count').textContent).toBe('0 of 5 packages');
  });

  it('says when the script has not recorded its environment yet', () => {
    renderTab(<CodeTab />, commandRunDetail());
    expect(screen.getByText(/Not recorded yet/)).toBeTruthy();
    expect(screen.queryByRole('table')).toBeNull();
  });

  it("shows a script's own run: no uploaded code, its checkout's git state, untracked files and recorded config", () => {
    const git = { commit: '0123456789abcdef', dirty: true, diff: DIFF, untracked: ['notes.txt', 'scratch.py'] };
    const run = commandRunDetail(
      { external: true, code: null, argv: ['train.py'] },
      { environment: { ...environment, git, config: { warmup: 10 } } },
    );
    renderTab(<CodeTab />, run);
    expect(screen.getByText(/outside any worker: its git state is under Environment/)).toBeTruthy();
    expect(screen.getByTestId('git-commit').textContent).toBe('01234567');
    expect(screen.getByText('uncommitted changes')).toBeTruthy();
    expect(screen.getByLabelText("Script's checkout: uncommitted diff").textContent).toBe(DIFF);
    expect(screen.getByText('2 untracked files')).toBeTruthy();
    expect(screen.getByText('Config the script recorded').closest('details')!.textContent).toContain('warmup: 10');
  });
});

describe('code tab helpers', () => {
  it('shows the tab for command runs (and any run with an environment) only', () => {
    expect(hasCodeTab(commandRunDetail())).toBe(true);
    expect(hasCodeTab(runDetail())).toBe(false);
    expect(hasCodeTab(runDetail({ environment: { python: '3.12.1' } }))).toBe(true);
  });

  it('reads an environment record of any shape without breaking, and quotes only what a shell would split', () => {
    expect(environmentOf(null)).toBeNull();
    const odd = environmentOf({ python: 3, packages: ['x'], argv: 'a b', git: 'yes', config: {} })!;
    expect(odd).toMatchObject({ python: null, packages: [], argv: [], git: null, config: null });
    expect(filterPackages([['Jinja2', '3.1'], ['zope.interface', '7']], 'zope-int')).toEqual([['zope.interface', '7']]);
    expect(shellLine(['python', 'a.py', '--x', "it's", '', '{run.dir}/out', '$HOME'])).toBe(
      `python a.py --x 'it'\\''s' '' {run.dir}/out '$HOME'`,
    );
  });
});
