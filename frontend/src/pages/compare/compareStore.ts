import type { KeySummary } from '../../api/types';
import { candidateGroups, findDuplicates } from '../../charts/duplicates';
import { Listeners } from '../../charts/listeners';
import { appendPoints, fromColumns, type SeriesBuffer } from '../../charts/series';
import type { ChartLine, ChartSource, KeyInfo } from '../../charts/source';
import { MAX_POINTS } from '../../charts/useMetricHistory';
import type { RunSeriesColumns, SeriesWant } from './compareApi';
import { SeriesBatcher } from './seriesBatcher';

/** A run on the Compare page's charts: its line's label and colour. */
export interface ComparedLine {
  id: number;
  label: string;
  color: string;
}

/** Several runs' series in one request (POST /api/v1/compare/series), answered in the asked order. */
export type FetchSeries = (wanted: SeriesWant[]) => Promise<RunSeriesColumns[]>;

/** One run's side of the charts. */
interface RunSeries {
  summaries: Map<string, KeySummary>;
  buffers: Map<string, SeriesBuffer>;
  /** Each fetched key's summary signature when it was asked for: another one now means it gained points since. */
  askedAt: Map<string, string>;
  loading: Set<string>;
}

const signature = (s: KeySummary) => `${s.count}|${s.last_step}|${String(s.last_value)}`;

// Points appended after a downsampled history are raw: past this many the whole series is fetched again, so a
// chart left open for hours does not grow without bound.
const REDOWNSAMPLE_PAST = 2 * MAX_POINTS;

/**
 * Several runs' metrics for Compare's charts. Key lists come from the page's poll (setKeys); a key's histories
 * are fetched for every run at once when its chart scrolls into view, and when a run's key list shows the key
 * gained points, only the points past the held copy are fetched and appended. Requests are batched across runs,
 * so none is per run.
 */
export class CompareStore implements ChartSource {
  private runs: ComparedLine[] = [];
  private held = new Map<number, RunSeries>();
  private batcher: SeriesBatcher;
  private wanted = new Set<string>();
  private listeners = new Listeners();
  private keyList: KeyInfo[] = [];
  private groups: string[][] = [];
  private dups: ReadonlyMap<string, string> = new Map();

  constructor(private readonly fetchSeries: FetchSeries) {
    this.batcher = new SeriesBatcher((wanted) => this.fetchBatch(wanted));
  }

  keys(): readonly KeyInfo[] {
    return this.keyList;
  }

  duplicates(): ReadonlyMap<string, string> {
    return this.dups;
  }

  lines(key: string): ChartLine[] {
    return this.runs.map((r) => {
      const mine = this.held.get(r.id);
      return { label: r.label, color: r.color, buf: mine?.buffers.get(key), expected: mine?.summaries.get(key)?.count };
    });
  }

  loaded(key: string): boolean {
    return this.runs.every((r) => {
      const mine = this.held.get(r.id);
      return !mine?.summaries.has(key) || mine.buffers.has(key);
    });
  }

  /** The runs charted, in legend order. */
  setRuns(runs: readonly ComparedLine[]): void {
    const same = runs.length === this.runs.length && runs.every((r, i) => JSON.stringify(r) === JSON.stringify(this.runs[i]));
    if (same) return;
    this.runs = [...runs];
    this.keysChanged();
    for (const key of this.wanted) this.fetchMissing(key);
    this.listeners.notifyAll();
  }

  /** A run's key list; keys on screen that gained points since they were fetched get the points they lack. */
  setKeys(runId: number, list: readonly KeySummary[]): void {
    this.setKeyLists([[runId, list]]);
  }

  /** Several runs' key lists (a poll's), merged into the chart list once: merging after each run's would redo the
   * whole merge once per run (20 runs x 300 keys, twenty times over, was a tenth of a second of Compare's open). */
  setKeyLists(lists: Iterable<readonly [number, readonly KeySummary[]]>): void {
    for (const [runId, list] of lists) {
      this.run(runId).summaries = new Map(list.map((s) => [s.key, s]));
      for (const key of this.wanted) this.refresh(runId, key);
    }
    this.keysChanged();
    for (const key of this.wanted) this.fetchMissing(key);
  }

  request(key: string): void {
    const mates = this.groups.find((g) => g.includes(key)) ?? [];
    for (const k of [key, ...mates]) {
      this.wanted.add(k);
      this.fetchMissing(k);
    }
  }

  subscribe(key: string, fn: () => void): () => void {
    return this.listeners.subscribe(key, fn);
  }

  subscribeKeys(fn: () => void): () => void {
    return this.listeners.subscribeKeys(fn);
  }

  private run(runId: number): RunSeries {
    let mine = this.held.get(runId);
    if (!mine) this.held.set(runId, (mine = { summaries: new Map(), buffers: new Map(), askedAt: new Map(), loading: new Set() }));
    return mine;
  }

  /** The key's whole history for each charted run that has the key and no copy of it. */
  private fetchMissing(key: string): void {
    for (const r of this.runs) {
      const mine = this.held.get(r.id);
      const summary = mine?.summaries.get(key);
      if (!mine || !summary || mine.buffers.has(key) || mine.loading.has(key)) continue;
      this.ask(r.id, key, summary, undefined);
    }
  }

  /** The points a held copy lacks, when the run's key list says it gained some and none are on their way. */
  private refresh(runId: number, key: string): void {
    const mine = this.held.get(runId);
    const buf = mine?.buffers.get(key);
    const now = mine?.summaries.get(key);
    if (!mine || !buf || !now || mine.loading.has(key) || mine.askedAt.get(key) === signature(now)) return;
    const last = buf.steps.at(-1);
    this.ask(runId, key, now, last == null || buf.steps.length > REDOWNSAMPLE_PAST ? undefined : last);
  }

  private ask(runId: number, key: string, summary: KeySummary, afterStep: number | undefined): void {
    const mine = this.run(runId);
    mine.loading.add(key);
    mine.askedAt.set(key, signature(summary));
    this.batcher.add(afterStep == null ? { runId, key } : { runId, key, afterStep });
  }

  private fetchBatch(wanted: SeriesWant[]): Promise<void> {
    return this.fetchSeries(wanted).then(
      (series) => this.load(series),
      () => {
        // The whole request fails when one run cannot be read; the legend shows that run's error (from the
        // poll), and the next key list asks again, as nothing counts as fetched.
        for (const { runId, key } of wanted) {
          this.held.get(runId)?.loading.delete(key);
          this.held.get(runId)?.askedAt.delete(key);
        }
      },
    );
  }

  private load(series: readonly RunSeriesColumns[]): void {
    for (const s of series) this.take(s);
    if (this.updateDuplicates()) this.listeners.notifyKeys();
    for (const key of new Set(series.map((s) => s.key))) this.listeners.notify(key);
    // Points may have arrived while these were on their way.
    for (const s of series) this.refresh(s.run_id, s.key);
  }

  /** A whole series replaces the held copy; one asked from a step (`after_step` set) is appended to it. */
  private take(s: RunSeriesColumns): void {
    const mine = this.run(s.run_id);
    mine.loading.delete(s.key);
    if (s.after_step == null) mine.buffers.set(s.key, fromColumns(s));
    else {
      const buf = mine.buffers.get(s.key);
      if (buf) appendPoints(buf, s);
    }
  }

  private keysChanged(): void {
    const infos = new Map<string, { points: number; signatures: string[] }>();
    this.runs.forEach((r, i) => {
      for (const s of this.held.get(r.id)?.summaries.values() ?? []) {
        let info = infos.get(s.key);
        if (!info) infos.set(s.key, (info = { points: 0, signatures: Array<string>(this.runs.length).fill('-') }));
        info.points = Math.max(info.points, s.count);
        info.signatures[i] = signature(s);
      }
    });
    const list = [...infos].map(([key, i]) => ({ key, points: i.points, signature: i.signatures.join(',') }));
    const changed = JSON.stringify(list) !== JSON.stringify(this.keyList);
    if (changed) this.keyList = list;
    this.groups = candidateGroups(this.keyList);
    for (const g of this.groups) if (g.some((k) => this.wanted.has(k))) g.forEach((k) => this.request(k));
    if (this.updateDuplicates() || changed) this.listeners.notifyKeys();
  }

  private updateDuplicates(): boolean {
    const next = findDuplicates(this.groups, (key) =>
      this.loaded(key) ? this.runs.map((r) => this.held.get(r.id)?.buffers.get(key)) : null,
    );
    const same = next.size === this.dups.size && [...next].every(([k, v]) => this.dups.get(k) === v);
    this.dups = same ? this.dups : next;
    return !same;
  }
}
