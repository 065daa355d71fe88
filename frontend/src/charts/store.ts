import type { KeySummary, Series } from '../api/types';
import type { LiveColumns } from '../sse/runEvents';
import { KeyBatcher } from './batcher';
import { candidateGroups, findDuplicates } from './duplicates';
import { Listeners } from './listeners';
import { appendPoints, fromColumns, fromSeries, toNumber, type PointColumns, type SeriesBuffer, type SeriesColumns } from './series';
import type { ChartLine, ChartSource, KeyInfo } from './source';

interface Known {
  points: number;
  lastStep: number;
  lastValue: string;
}

/**
 * A run's metrics for its charts, outside React state so a live point redraws only its chart
 * (through uPlot's setData). The key list comes first (from the keys endpoint and the stream);
 * a key's history is fetched when its chart asks (it scrolled near the viewport), in batches.
 */
export class MetricStore implements ChartSource {
  private known = new Map<string, Known>();
  private buffers = new Map<string, SeriesBuffer>();
  private loading = new Map<string, PointColumns[]>(); // key -> live points that came while its history was on the way
  private listeners = new Listeners();
  private keyList: KeyInfo[] = [];
  private groups: string[][] = [];
  private dups = new Map<string, string>();
  private batcher: KeyBatcher;

  constructor(fetchSeries: (keys: string[]) => Promise<SeriesColumns[]>, onError: (err: unknown) => void = () => {}) {
    this.batcher = new KeyBatcher((keys) =>
      fetchSeries(keys).then(
        (series) => this.loadColumns(series),
        (err: unknown) => {
          for (const k of keys) this.loading.delete(k); // asked again when its chart next mounts
          onError(err);
        },
      ),
    );
  }

  keys(): readonly KeyInfo[] {
    return this.keyList;
  }

  /** duplicate key -> the key whose chart draws it. */
  duplicates(): ReadonlyMap<string, string> {
    return this.dups;
  }

  lines(key: string): ChartLine[] {
    return [{ label: key, color: 'var(--chart-line)', buf: this.buffers.get(key), expected: this.known.get(key)?.points }];
  }

  get(key: string): SeriesBuffer | undefined {
    return this.buffers.get(key);
  }

  loaded(key: string): boolean {
    return this.buffers.has(key);
  }

  /** The keys endpoint's answer. */
  setKeyList(summaries: readonly KeySummary[]): void {
    for (const s of summaries) {
      const mine = this.known.get(s.key);
      if (!mine || mine.lastStep <= s.last_step) {
        this.known.set(s.key, { points: s.count, lastStep: s.last_step, lastValue: String(s.last_value) });
      }
    }
    this.keysChanged();
  }

  request(key: string): void {
    const wanted = [key, ...(this.groups.find((g) => g.includes(key)) ?? [])];
    const fresh = wanted.filter((k) => !this.buffers.has(k) && !this.loading.has(k));
    for (const k of fresh) this.loading.set(k, []);
    if (fresh.length) this.batcher.add(fresh);
  }

  /** Defers fetching while index.html's early answer (every key at once) may make it unneeded. */
  hold(): void {
    this.batcher.hold();
  }

  release(): void {
    this.batcher.release((k) => !this.buffers.has(k));
  }

  /** Every key's history at once (index.html's early answer). */
  load(series: readonly Series[]): void {
    this.put(series.map((s) => ({ key: s.key, total: s.total_points, buf: fromSeries(s) })));
  }

  /** A batch of histories, as columns. */
  loadColumns(series: readonly SeriesColumns[]): void {
    this.put(series.map((s) => ({ key: s.key, total: s.total_points, buf: fromColumns(s) })));
  }

  private put(series: ReadonlyArray<{ key: string; total: number; buf: SeriesBuffer }>): void {
    let newKey = false;
    for (const { key, total, buf } of series) {
      for (const points of this.loading.get(key) ?? []) appendPoints(buf, points);
      this.loading.delete(key);
      this.buffers.set(key, buf);
      if (!this.known.has(key) && buf.steps.length) {
        this.learn(key, total, buf.steps.at(-1)!, buf.values.at(-1) ?? 'NaN');
        newKey = true;
      }
    }
    if (newKey) this.keysChanged();
    else if (this.updateDuplicates()) this.notifyKeys();
    for (const { key } of series) this.notify(key);
  }

  /** A metrics message of the live stream: one entry per key. */
  append(series: readonly LiveColumns[]): void {
    let newKey = false;
    for (const points of series) {
      const { key, step } = points;
      if (!step.length) continue;
      let top = 0; // the first point of the highest step
      for (let i = 1; i < step.length; i++) if (step[i]! > step[top]!) top = i;
      const mine = this.known.get(key);
      if (!mine) newKey = true;
      if (!mine || step[top]! > mine.lastStep) {
        const added = step.filter((s) => s > (mine?.lastStep ?? -Infinity)).length;
        this.learn(key, (mine?.points ?? 0) + added, step[top]!, points.value[top]!);
      }
      const buf = this.buffers.get(key);
      if (buf) {
        if (appendPoints(buf, points) > 0) this.notify(key);
      } else {
        this.loading.get(key)?.push(points); // else not on screen: its history is fetched when it is
      }
    }
    if (newKey) this.keysChanged();
    else if (this.updateGroups() || this.updateDuplicates()) this.notifyKeys();
  }

  subscribe(key: string, fn: () => void): () => void {
    return this.listeners.subscribe(key, fn);
  }

  /** The key list or the duplicates changed. */
  subscribeKeys(fn: () => void): () => void {
    return this.listeners.subscribeKeys(fn);
  }

  private learn(key: string, points: number, lastStep: number, lastValue: number | string): void {
    this.known.set(key, { points, lastStep, lastValue: String(toNumber(lastValue) ?? lastValue) });
  }

  private keysChanged(): void {
    this.keyList = [...this.known].map(([key, k]) => ({ key, points: k.points, signature: `${k.points}|${k.lastStep}|${k.lastValue}` }));
    this.updateGroups();
    this.updateDuplicates();
    this.notifyKeys();
  }

  /** Regroups candidates; a group one of whose keys is on screen is fetched whole, to be compared. */
  private updateGroups(): boolean {
    const list = this.keyList.map((k) => ({ ...k, ...this.signatureOf(k.key) }));
    const groups = candidateGroups(list);
    const same = JSON.stringify(groups) === JSON.stringify(this.groups);
    this.groups = groups;
    for (const g of groups) if (g.some((k) => this.buffers.has(k) || this.loading.has(k))) g.forEach((k) => this.request(k));
    return !same;
  }

  private signatureOf(key: string): { points: number; signature: string } {
    const k = this.known.get(key)!;
    return { points: k.points, signature: `${k.points}|${k.lastStep}|${k.lastValue}` };
  }

  private updateDuplicates(): boolean {
    const next = findDuplicates(this.groups, (key) => (this.buffers.has(key) ? [this.buffers.get(key)] : null));
    const same = next.size === this.dups.size && [...next].every(([k, v]) => this.dups.get(k) === v);
    if (!same) this.dups = next;
    return !same;
  }

  private notify(key: string): void {
    this.listeners.notify(key);
  }

  private notifyKeys(): void {
    this.listeners.notifyKeys();
  }
}
