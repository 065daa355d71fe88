/**
 * Keys per history request (the API takes up to 100). Small batches, few at a time: the charts at
 * the top of the page (asked first) get their answer first instead of sharing the server with
 * every chart within reach of a scroll.
 */
export const BATCH = 8;
export const IN_FLIGHT = 2;

/**
 * Collects the keys charts ask for as they scroll into view and fetches them in batches, in the
 * order asked, at most IN_FLIGHT requests at a time. `hold` defers fetching (while index.html's
 * early answer may still bring them all).
 */
export class KeyBatcher {
  private queue: string[] = [];
  private queued = new Set<string>();
  private scheduled = false;
  private held = false;
  private inFlight = 0;

  constructor(private readonly fetchBatch: (keys: string[]) => Promise<unknown>) {}

  add(keys: Iterable<string>): void {
    for (const k of keys) {
      if (this.queued.has(k)) continue;
      this.queued.add(k);
      this.queue.push(k);
    }
    this.schedule();
  }

  hold(): void {
    this.held = true;
  }

  /** Stops holding; `keep` drops queued keys the early answer already brought. */
  release(keep: (key: string) => boolean = () => true): void {
    this.held = false;
    this.queue = this.queue.filter((k) => keep(k) || !this.queued.delete(k));
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled || this.held || this.queue.length === 0) return;
    this.scheduled = true;
    // Charts ask from one React commit or one observer callback: fetch once that has finished.
    queueMicrotask(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (!this.held && this.inFlight < IN_FLIGHT && this.queue.length > 0) {
      const keys = this.queue.splice(0, BATCH);
      keys.forEach((k) => this.queued.delete(k));
      this.inFlight++;
      void this.fetchBatch(keys)
        .catch(() => {})
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }
}
