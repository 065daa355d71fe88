import type { KeySummary } from '../../api/types';
import { KeyBatcher } from '../../charts/batcher';
import { candidateGroups, findDuplicates } from '../../charts/duplicates';
import { Listeners } from '../../charts/listeners';
import { fromColumns, type SeriesBuffer, type SeriesColumns } from '../../charts/series';
import type { ChartLine, ChartSource, KeyInfo } from '../../charts/source';

/** A run on the Compare page's charts: its line's label and colour. */
export interface ComparedLine {
  id: number;
  label: string;
  color: string;
}

const signature = (s: KeySummary) => `${s.count}|${s.last_step}|${String(s.last_value)}`;

/**
 * Several runs' metrics for Compare's charts. Key lists come from each run's keys endpoint
 * (polled while the run is active); a key's history is fetched, per run, when its chart scrolls
 * into view, and fetched again when a run's key list shows it gained points.
 */
export class CompareStore implements ChartSource {
  private runs: ComparedLine[] = [];
  private summaries = new Map<number, Map<string, KeySummary>>();
  private buffers = new Map<number, Map<string, SeriesBuffer>>();
  private loading = new Map<number, Set<string>>();
  private batchers = new Map<number, KeyBatcher>();
  private wanted = new Set<string>();
  private listeners = new Listeners();
  private keyList: KeyInfo[] = [];
  private groups: string[][] = [];
  private dups: ReadonlyMap<string, string> = new Map();

  constructor(private readonly fetchSeries: (runId: number, keys: string[]) => Promise<SeriesColumns[]>) {}

  keys(): readonly KeyInfo[] {
    return this.keyList;
  }

  duplicates(): ReadonlyMap<string, string> {
    return this.dups;
  }

  lines(key: string): ChartLine[] {
    return this.runs.map((r) => ({
      label: r.label,
      color: r.color,
      buf: this.buffers.get(r.id)?.get(key),
      expected: this.summaries.get(r.id)?.get(key)?.count,
    }));
  }

  loaded(key: string): boolean {
    return this.runs.every((r) => !this.summaries.get(r.id)?.has(key) || this.buffers.get(r.id)?.has(key));
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

  /** A run's key list; keys on screen that gained points since their history was fetched are fetched again. */
  setKeys(runId: number, list: readonly KeySummary[]): void {
    const before = this.summaries.get(runId);
    const next = new Map(list.map((s) => [s.key, s]));
    this.summaries.set(runId, next);
    const stale = [...this.wanted].filter((key) => {
      const was = before?.get(key);
      const now = next.get(key);
      return now && was && signature(now) !== signature(was) && this.buffers.get(runId)?.has(key);
    });
    if (stale.length) this.batcher(runId).add(stale);
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

  private fetchMissing(key: string): void {
    for (const r of this.runs) {
      const has = this.summaries.get(r.id)?.has(key);
      const loading = this.loading.get(r.id) ?? new Set<string>();
      this.loading.set(r.id, loading);
      if (!has || this.buffers.get(r.id)?.has(key) || loading.has(key)) continue;
      loading.add(key);
      this.batcher(r.id).add([key]);
    }
  }

  private batcher(runId: number): KeyBatcher {
    let b = this.batchers.get(runId);
    if (!b) {
      b = new KeyBatcher((keys) =>
        this.fetchSeries(runId, keys).then(
          (series) => this.load(runId, series),
          () => keys.forEach((k) => this.loading.get(runId)?.delete(k)), // the legend shows the run's error
        ),
      );
      this.batchers.set(runId, b);
    }
    return b;
  }

  private load(runId: number, series: readonly SeriesColumns[]): void {
    const mine = this.buffers.get(runId) ?? new Map<string, SeriesBuffer>();
    this.buffers.set(runId, mine);
    for (const s of series) {
      mine.set(s.key, fromColumns(s));
      this.loading.get(runId)?.delete(s.key);
    }
    if (this.updateDuplicates()) this.listeners.notifyKeys();
    for (const s of series) this.listeners.notify(s.key);
  }

  private keysChanged(): void {
    const infos = new Map<string, { points: number; signatures: string[] }>();
    this.runs.forEach((r, i) => {
      for (const s of this.summaries.get(r.id)?.values() ?? []) {
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
      this.loaded(key) ? this.runs.map((r) => this.buffers.get(r.id)?.get(key)) : null,
    );
    const same = next.size === this.dups.size && [...next].every(([k, v]) => this.dups.get(k) === v);
    this.dups = same ? this.dups : next;
    return !same;
  }
}
