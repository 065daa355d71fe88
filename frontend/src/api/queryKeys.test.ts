import { describe, expect, it } from 'vitest';
import { QueryClient, type QueryKey } from '@tanstack/react-query';
import { queryKeys } from './queryKeys';

const { runs, samples } = queryKeys;

function invalidatedBy(key: QueryKey, cached: Record<string, QueryKey>): string[] {
  const client = new QueryClient();
  for (const k of Object.values(cached)) client.setQueryData(k, 1);
  void client.invalidateQueries({ queryKey: key, refetchType: 'none' });
  return Object.entries(cached)
    .filter(([, k]) => client.getQueryState(k)?.isInvalidated)
    .map(([name]) => name);
}

describe('queryKeys', () => {
  const cached = {
    detail: runs.detail(7),
    keys: runs.metricKeys(7),
    checkpoints: runs.checkpoints(7),
    files: runs.checkpointFiles(7, 100, 'checkpoint'),
    samples: samples.atStep(7, 40, false),
    otherRun: runs.detail(8),
    list: runs.list({ sort: '-created_at', limit: 50, offset: 0 }),
    projects: queryKeys.projects.list(),
    pipelines: queryKeys.pipelines.list({ limit: 100 }),
    pipeline: queryKeys.pipelines.detail(7),
    sweeps: queryKeys.sweeps.list({ limit: 100 }),
    sweep: queryKeys.sweeps.detail(7),
    runAlerts: queryKeys.alerts.list({ run_id: 7 }),
    openAlerts: queryKeys.alerts.list({ state: 'open', limit: 1000 }),
    detectors: queryKeys.alerts.detectors(),
  };

  it('nest: one run covers all it logged, a run\'s detail only itself, the lists only the lists', () => {
    expect(invalidatedBy(runs.one(7), cached)).toEqual(['detail', 'keys', 'checkpoints', 'files', 'samples']);
    expect(invalidatedBy(runs.detail(7), cached)).toEqual(['detail']);
    expect(invalidatedBy(runs.lists(), cached)).toEqual(['list']);
    expect(invalidatedBy(samples.all(7), cached)).toEqual(['samples']);
    expect(invalidatedBy(runs.checkpoints(7), cached)).toEqual(['checkpoints', 'files']);
    // A pipeline action refreshes the lists; its own answer replaces the detail, so no refetch of that.
    expect(invalidatedBy(queryKeys.pipelines.lists(), cached)).toEqual(['pipelines']);
    expect(invalidatedBy(queryKeys.sweeps.lists(), cached)).toEqual(['sweeps']);
    // Refreshing alerts leaves the detectors, which change only with the API's code.
    expect(invalidatedBy(queryKeys.alerts.lists(), cached)).toEqual(['runAlerts', 'openAlerts']);
  });
});

// Vite reads the sources at build time: each file's text, by path.
const SOURCES = import.meta.glob(['../**/*.{ts,tsx}', '!../**/*.test.{ts,tsx}', '!./queryKeys.ts', '!./schema.d.ts'], {
  query: '?raw',
  import: 'default',
  eager: true,
}) as Record<string, string>;

describe('every query key comes from queryKeys', () => {
  it('no source spells a key by hand', () => {
    expect(Object.keys(SOURCES).length).toBeGreaterThan(50);
    const handMade = /queryKey:\s*[[']|(setQueryData|getQueryData)(<[^>]*>)?\(\s*\[/;
    const offenders = Object.entries(SOURCES)
      .filter(([, text]) => handMade.test(text))
      .map(([path]) => path);
    expect(offenders).toEqual([]);
  });
});
