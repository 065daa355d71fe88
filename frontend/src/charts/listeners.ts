type Listener = () => void;

/**
 * Who watches which series, and who watches the key list: the bookkeeping both chart stores (a run's and
 * Compare's) keep, so a new point redraws only the charts of its key.
 */
export class Listeners {
  private byKey = new Map<string, Set<Listener>>();
  private ofKeys = new Set<Listener>();

  subscribe(key: string, fn: Listener): () => void {
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    set.add(fn);
    return () => set.delete(fn);
  }

  /** The key list or the duplicates changed. */
  subscribeKeys(fn: Listener): () => void {
    this.ofKeys.add(fn);
    return () => this.ofKeys.delete(fn);
  }

  notify(key: string): void {
    this.byKey.get(key)?.forEach((fn) => fn());
  }

  notifyKeys(): void {
    this.ofKeys.forEach((fn) => fn());
  }

  notifyAll(): void {
    this.byKey.forEach((set) => set.forEach((fn) => fn()));
  }
}
