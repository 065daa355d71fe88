import type { SeriesBuffer } from './series';

/** One line of a chart: one run's series for the chart's key. */
export interface ChartLine {
  label: string;
  /** A CSS colour or `var(--name)`, resolved against the theme when the chart is built. */
  color: string;
  buf: SeriesBuffer | undefined;
  /** Points stored, from the key list: the chart is built for them before the history arrives. */
  expected?: number;
}

/** What the key list knows before any history is fetched. */
export interface KeyInfo {
  key: string;
  /** Points stored (the most of any compared run). */
  points: number;
  /** Point count, last step and last value (per run): keys that share it may be identical series. */
  signature: string;
}

/**
 * Where charts get their data: the run page's live store and Compare's polled one. A chart asks
 * for its key's history when it scrolls into view (request) and redraws when notified.
 */
export interface ChartSource {
  lines(key: string): ChartLine[];
  /** Whether the key's history has arrived (for every run). */
  loaded(key: string): boolean;
  request(key: string): void;
  subscribe(key: string, fn: () => void): () => void;
}
