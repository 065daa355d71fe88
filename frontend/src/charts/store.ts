import type { Series } from '../api/types';
import type { LivePoint } from '../sse/runEvents';
import { appendPoints, fromSeries, type SeriesBuffer } from './series';

type Listener = () => void;

/**
 * Holds every metric's points outside React state so live points redraw only their chart
 * (through uPlot's setData) instead of re-rendering the page.
 */
export class MetricStore {
  private buffers = new Map<string, SeriesBuffer>();
  private listeners = new Map<string, Set<Listener>>();
  private keyListeners = new Set<Listener>();
  private pending: LivePoint[] = [];
  private loaded = false;

  get(key: string): SeriesBuffer | undefined {
    return this.buffers.get(key);
  }

  keys(): string[] {
    return [...this.buffers.keys()];
  }

  /** The initial (downsampled) history; live points that came before it are applied after. */
  load(series: Series[]): void {
    for (const s of series) this.buffers.set(s.key, fromSeries(s));
    this.loaded = true;
    const pending = this.pending;
    this.pending = [];
    this.append(pending, true);
    this.notifyKeys();
  }

  append(points: LivePoint[], quietKeys = false): void {
    if (!this.loaded) {
      this.pending.push(...points);
      return;
    }
    const byKey = new Map<string, LivePoint[]>();
    for (const p of points) {
      let list = byKey.get(p.key);
      if (!list) byKey.set(p.key, (list = []));
      list.push(p);
    }
    let newKey = false;
    for (const [key, list] of byKey) {
      let buf = this.buffers.get(key);
      if (!buf) {
        this.buffers.set(key, (buf = { steps: [], times: [], values: [] }));
        newKey = true;
      }
      if (appendPoints(buf, list) > 0) this.listeners.get(key)?.forEach((fn) => fn());
    }
    if (newKey && !quietKeys) this.notifyKeys();
  }

  subscribe(key: string, fn: Listener): () => void {
    let set = this.listeners.get(key);
    if (!set) this.listeners.set(key, (set = new Set()));
    set.add(fn);
    return () => set.delete(fn);
  }

  subscribeKeys(fn: Listener): () => void {
    this.keyListeners.add(fn);
    return () => this.keyListeners.delete(fn);
  }

  private notifyKeys(): void {
    this.keyListeners.forEach((fn) => fn());
  }
}
