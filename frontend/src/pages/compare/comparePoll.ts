import { replaceEqualDeep } from '@tanstack/react-query';
import { isTerminal } from '../../api/runStatus';
import type { KeySummary, RunDetail } from '../../api/types';
import { MAX_RUNS, type KeyDelta, type RunProblem, type WireComparedRun } from './compareApi';

/** One compared run as the answers so far add up: unchanged parts keep their objects, so memos on them hold. */
export interface HeldRun {
  id: number;
  run: RunDetail | undefined;
  keys: KeySummary[] | undefined;
  /** Why it cannot be shown (404, 403): it is not asked about again. */
  problem: RunProblem | null;
}

interface RunState {
  held: HeldRun;
  byKey: Map<string, KeySummary>;
  /** What to send back for only the keys that changed; unset, the next poll asks for the whole list. */
  cursor: string | undefined;
  /** It ended since the poll before: it may have logged its last points after that poll, so ask once more. */
  lastPoll: boolean;
  /** The request this state comes from: a slower, older answer arriving later must not overwrite it. */
  answer: number;
}

export type AskComparison = (ids: readonly number[], cursors: ReadonlyMap<number, string>) => Promise<WireComparedRun[]>;

// Not a 404 or 403: the API answered a readable run without its detail, which it never should.
const NO_DETAIL: RunProblem = { status: 500, detail: 'the API sent neither the run nor why not' };

/**
 * Compare's poll across ticks: each run's key-list cursor and merged keys, so a poll of many runs is one request
 * that carries only what changed, and runs known to have ended are no longer asked about.
 */
export class ComparePoll {
  private states = new Map<number, RunState>();
  private compared = new Set<number>();
  private requests = 0;

  constructor(private readonly ask: AskComparison) {}

  /** The runs the next poll asks about: unseen ones, and those not known to have ended (once more as they end). */
  due(ids: readonly number[]): number[] {
    return ids.filter((id) => {
      const state = this.states.get(id);
      if (!state) return true;
      if (state.held.problem) return false;
      return state.lastPoll || !state.held.run || !isTerminal(state.held.run.status);
    });
  }

  /** One tick: asks about the due runs and answers every compared run's state. */
  async poll(ids: readonly number[]): Promise<HeldRun[]> {
    this.forgetAllBut(ids);
    const due = this.due(ids);
    if (due.length) {
      const finals = new Set(due.filter((id) => this.states.get(id)?.lastPoll));
      const missed = await this.request(due, finals);
      // Points arrived at earlier steps than the cursor covers: their lists again, whole, once (a second
      // miss waits for the next tick rather than loop).
      if (missed.length) await this.request(missed, new Set());
    }
    return ids.flatMap((id) => this.states.get(id)?.held ?? []);
  }

  private forgetAllBut(ids: readonly number[]): void {
    this.compared = new Set(ids);
    for (const id of this.states.keys()) if (!this.compared.has(id)) this.states.delete(id);
  }

  /**
   * Asks in chunks the API takes; answers the runs whose merged counts do not add up. `finals`: the runs this is
   * the last poll of.
   */
  private async request(ids: readonly number[], finals: ReadonlySet<number>): Promise<number[]> {
    const chunks: number[][] = [];
    for (let i = 0; i < ids.length; i += MAX_RUNS) chunks.push(ids.slice(i, i + MAX_RUNS));
    const missed = await Promise.all(chunks.map((chunk) => this.requestChunk(chunk, finals)));
    return missed.flat();
  }

  private async requestChunk(ids: readonly number[], finals: ReadonlySet<number>): Promise<number[]> {
    const answer = ++this.requests;
    const cursors = new Map<number, string>();
    for (const id of ids) {
      const cursor = this.states.get(id)?.cursor;
      if (cursor) cursors.set(id, cursor);
    }
    const runs = await this.ask(ids, cursors);
    return runs.filter((entry) => this.apply(entry, answer, finals.has(entry.id))).map((entry) => entry.id);
  }

  /** Takes in one run's answer; true when its key delta missed points. */
  private apply(entry: WireComparedRun, answer: number, final: boolean): boolean {
    const was = this.states.get(entry.id);
    if (!this.compared.has(entry.id) || (was && was.answer > answer)) return false;
    const problem = entry.error ?? (entry.run ? null : NO_DETAIL);
    if (problem || !entry.run) {
      const held = { id: entry.id, run: undefined, keys: undefined, problem };
      this.states.set(entry.id, { held, byKey: new Map(), cursor: undefined, lastPoll: false, answer });
      return false;
    }
    const wasRun = was?.held.run;
    const run = replaceEqualDeep(wasRun, entry.run);
    const { byKey, keys, cursor, missed } = mergeKeys(was, entry.keys);
    const same = was && !was.held.problem && wasRun === run && was.held.keys === keys;
    const held = same ? was.held : { id: entry.id, run, keys, problem: null };
    const ended = wasRun != null && !isTerminal(wasRun.status) && isTerminal(run.status);
    const lastPoll = ended || (was?.lastPoll === true && !final);
    this.states.set(entry.id, { held, byKey, cursor, lastPoll, answer });
    return missed;
  }
}

/**
 * A key delta merged into what is held: a full list replaces it, a partial one replaces entries by key. When the
 * held counts then do not add up to the run's count, points arrived before the cursor's step: the cursor is
 * dropped so the run's whole list is asked for.
 */
function mergeKeys(was: RunState | undefined, delta: KeyDelta | null | undefined) {
  const held = was && !was.held.problem ? was : undefined;
  if (!delta) {
    return { byKey: held?.byKey ?? new Map<string, KeySummary>(), keys: held?.held.keys ?? [], cursor: held?.cursor, missed: false };
  }
  const byKey = delta.full || !held ? new Map<string, KeySummary>() : held.byKey;
  for (const summary of delta.data) byKey.set(summary.key, summary);
  const unchanged = held?.held.keys && !delta.full && delta.data.length === 0;
  const keys = unchanged ? held.held.keys : replaceEqualDeep(held?.held.keys, [...byKey.values()]);
  let total = 0;
  for (const summary of byKey.values()) total += summary.count;
  const missed = total !== delta.count;
  return { byKey, keys, cursor: missed ? undefined : delta.cursor, missed };
}
