import { useId, useMemo, useState } from 'react';
import { LazyChart } from './LazyChart';
import { groupPanels, searchKeys, type Panel } from './panels';
import { toggleCollapsed, togglePin, useCollapsed, usePins } from './pins';
import type { ChartSource, KeyInfo } from './source';

/** Charts a group shows before "Show more": a few screens, so thousands of keys stay quick to lay out. */
export const PAGE = 24;

export interface ChartSettings {
  smoothing: number;
  logScale: boolean;
  xBy: 'step' | 'time';
  /** How one run's eval answers were drawn (its config.decoding), said in its accuracy charts' titles; not on Compare. */
  decoding?: string | null;
}

interface Props extends ChartSettings {
  source: ChartSource;
  keys: readonly KeyInfo[];
  /** duplicate key -> the key whose chart draws it (identical series). */
  duplicates: ReadonlyMap<string, string>;
  search: string;
  onSearch: (query: string) => void;
}

/**
 * Every key's chart, grouped in reading order, with a search box over the keys and pinned charts
 * first. Only what is near the viewport is built and fetched (LazyChart); groups fold away.
 */
export function ChartPanels({ source, keys, duplicates, search, onSearch, ...settings }: Props) {
  const pinned = usePins();
  const collapsed = useCollapsed();
  const searchId = useId();
  const { panels, shown, same } = useMemo(() => {
    const names = keys.map((k) => k.key).filter((k) => !duplicates.has(k));
    const matching = searchKeys(names, search);
    const present = new Set(matching);
    const pinnedHere = pinned.filter((k) => present.has(k));
    const pinnedSet = new Set(pinnedHere);
    const groups: Panel[] = groupPanels(matching.filter((k) => !pinnedSet.has(k)));
    if (pinnedHere.length) groups.unshift({ title: 'Pinned', keys: pinnedHere });
    const alike = new Map<string, string[]>();
    for (const [dup, primary] of duplicates) alike.set(primary, [...(alike.get(primary) ?? []), dup]);
    return { panels: groups, shown: matching.length, same: alike };
  }, [keys, duplicates, search, pinned]);
  const total = keys.length - duplicates.size;

  return (
    <div className="chart-panels">
      <div className="chart-search" role="search">
        <label htmlFor={searchId}>Search keys</label>
        <input id={searchId} type="search" value={search} placeholder="e.g. loss grad" onChange={(e) => onSearch(e.target.value)} />
        <span className="muted" aria-live="polite">
          {search ? `${shown} of ${total} keys` : `${total} keys`}
        </span>
      </div>
      {search && shown === 0 && <p className="muted">No key matches “{search}”.</p>}
      {panels.map((panel) => (
        <ChartGroup
          key={panel.title}
          panel={panel}
          folded={collapsed.includes(panel.title)}
          pinned={pinned}
          same={same}
          source={source}
          settings={settings}
        />
      ))}
    </div>
  );
}

interface GroupProps {
  panel: Panel;
  folded: boolean;
  pinned: readonly string[];
  same: ReadonlyMap<string, string[]>;
  source: ChartSource;
  settings: ChartSettings;
}

function ChartGroup({ panel, folded, pinned, same, source, settings }: GroupProps) {
  const [limit, setLimit] = useState(PAGE);
  const bodyId = useId();
  const visible = panel.keys.slice(0, limit);
  const more = panel.keys.length - visible.length;
  return (
    <section className="panel" aria-label={panel.title} data-panel={panel.title}>
      <h2>
        <button type="button" className="panel-toggle" aria-expanded={!folded} aria-controls={bodyId} onClick={() => toggleCollapsed(panel.title)}>
          <span aria-hidden="true">{folded ? '▸' : '▾'}</span> {panel.title} <span className="muted">({panel.keys.length})</span>
        </button>
      </h2>
      {!folded && (
        <div id={bodyId}>
          <div className="chart-grid">
            {visible.map((key) => (
              <LazyChart
                key={key}
                source={source}
                metricKey={key}
                same={same.get(key)}
                {...settings}
                actions={<PinButton metricKey={key} pinned={pinned.includes(key)} />}
              />
            ))}
          </div>
          {more > 0 && (
            <button type="button" className="show-more" onClick={() => setLimit((n) => n + PAGE * 4)}>
              Show {Math.min(more, PAGE * 4)} more of {more}
            </button>
          )}
        </div>
      )}
    </section>
  );
}

function PinButton({ metricKey, pinned }: { metricKey: string; pinned: boolean }) {
  return (
    <button
      type="button"
      className="chart-pin linklike"
      aria-pressed={pinned}
      aria-label={`${pinned ? 'Unpin' : 'Pin'} ${metricKey}`}
      title={pinned ? 'Unpin' : 'Pin to the top'}
      onClick={() => togglePin(metricKey)}
    >
      {pinned ? '★' : '☆'}
    </button>
  );
}
