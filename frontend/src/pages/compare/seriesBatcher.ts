import { MAX_SERIES, type SeriesWant } from './compareApi';

/**
 * Whole histories per request (a chart's key across a few runs, or a few keys of many), one request at a time: the
 * charts at the top of the page (asked first) get their answer first instead of sharing the server with every chart
 * within reach of a scroll. 24 series, so a 20-run Compare's first chart comes in one answer; one at a time, since two
 * answers at once share the API's one process (bench/dashboard.py's fleet: 48 series of 1,000 points took ~440 ms
 * to arrive, 24 ~250 ms).
 */
export const WHOLE_SERIES = 24;
export const IN_FLIGHT = 1;

/**
 * Collects the series Compare's charts lack, across runs, and fetches them in batches at most IN_FLIGHT at a
 * time. Appends (the points past a held copy, a few each) go first and together: a poll's stale keys of all runs
 * are one request; whole histories fill the rest of a batch, in the order asked.
 */
export class SeriesBatcher {
  private appends: SeriesWant[] = [];
  private wholes: SeriesWant[] = [];
  private scheduled = false;
  private inFlight = 0;

  constructor(private readonly fetchBatch: (wanted: SeriesWant[]) => Promise<unknown>) {}

  add(want: SeriesWant): void {
    (want.afterStep == null ? this.wholes : this.appends).push(want);
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    // Charts ask from one React commit, and a poll's key lists arrive in one effect: fetch once that has finished.
    queueMicrotask(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < IN_FLIGHT && (this.appends.length > 0 || this.wholes.length > 0)) {
      const batch = this.appends.splice(0, MAX_SERIES);
      batch.push(...this.wholes.splice(0, Math.max(0, WHOLE_SERIES - batch.length)));
      this.inFlight++;
      void this.fetchBatch(batch)
        .catch(() => {})
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }
}
