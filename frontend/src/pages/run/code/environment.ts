import type { CodeSource } from '../../../api/types';

/** A repository's state: what the CLI recorded of a snapshot's tree, or the SDK of a script's working directory. */
export interface GitState {
  commit: string | null;
  dirty: boolean;
  diff: string | null;
  untracked: string[];
}

/** Where a command run's script ran, as its SDK recorded it (rlplane/sdk/environment.py). */
export interface RunEnvironment {
  python: string | null;
  executable: string | null;
  platform: string | null;
  hostname: string | null;
  cwd: string | null;
  argv: string[];
  /** [name, version], in the order recorded (by name). */
  packages: Array<[string, string]>;
  config: Record<string, unknown> | null;
  /** Only for a script started outside a worker (a worker's run has its code's git state in the spec). */
  git: GitState | null;
}

type Loose = Record<string, unknown>;

const isObject = (value: unknown): value is Loose => typeof value === 'object' && value !== null && !Array.isArray(value);
const text = (value: unknown): string | null => (typeof value === 'string' && value !== '' ? value : null);
const texts = (value: unknown): string[] => (Array.isArray(value) ? value.map(String) : []);

// The record is whatever the script's SDK sent (any version of it), so each field is read for what it holds.
function gitOf(value: unknown): GitState | null {
  if (!isObject(value)) return null;
  return { commit: text(value.commit), dirty: value.dirty === true, diff: text(value.diff), untracked: texts(value.untracked) };
}

export function environmentOf(raw: Loose | null | undefined): RunEnvironment | null {
  if (!isObject(raw)) return null;
  const packages = isObject(raw.packages)
    ? Object.entries(raw.packages).map(([name, version]): [string, string] => [name, String(version)])
    : [];
  return {
    python: text(raw.python),
    executable: text(raw.executable),
    platform: text(raw.platform),
    hostname: text(raw.hostname),
    cwd: text(raw.cwd),
    argv: texts(raw.argv),
    packages,
    config: isObject(raw.config) && Object.keys(raw.config).length ? raw.config : null,
    git: gitOf(raw.git),
  };
}

/** The git state the CLI recorded with a code snapshot or shared directory; null when it recorded none. */
export function codeGit(code: CodeSource): GitState | null {
  if (!code.git_commit && !code.git_dirty) return null;
  return { commit: code.git_commit ?? null, dirty: code.git_dirty, diff: code.git_diff ?? null, untracked: [] };
}

/** The packages whose name holds `query` (case and -/_/. ignored, as pip compares names). */
export function filterPackages(packages: Array<[string, string]>, query: string): Array<[string, string]> {
  const norm = (s: string) => s.toLowerCase().replace(/[-_.]+/g, '-');
  const q = norm(query.trim());
  return q ? packages.filter(([name]) => norm(name).includes(q)) : packages;
}

const PLAIN_WORD = /^[\w@%+=:,./{}-]+$/;

/** argv as one shell line, quoting only the words a shell would split or expand; placeholders stay as written. */
export function shellLine(argv: string[]): string {
  return argv.map((word) => (PLAIN_WORD.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`)).join(' ');
}

export const shortHash = (hash: string, length = 8) => hash.slice(0, length);
