import { useState } from 'react';
import { Link, useSearchParams } from 'react-router';
import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { useOpenAlertsByRun } from '../../api/alerts';
import { api, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import { ErrorNote } from '../../components/ErrorNote';
import { ColumnPicker } from './ColumnPicker';
import { loadColumns, saveColumns, type ConfigColumn } from './columns';
import { nextSort, parseFilters, toParams, toQuery, type RunFilters } from './filters';
import { RunFiltersForm } from './RunFiltersForm';
import { RunsTable } from './RunsTable';

const REFRESH_MS = 3000;

export function RunsPage() {
  const [params, setParams] = useSearchParams();
  const filters = parseFilters(params);
  const [selected, setSelected] = useState<Set<number>>(new Set());
  const [columns, setColumns] = useState<ConfigColumn[]>(loadColumns);
  const pickColumns = (next: ConfigColumn[]) => {
    saveColumns(next);
    setColumns(next);
  };

  const runs = useQuery({
    queryKey: queryKeys.runs.list(toQuery(filters)),
    queryFn: () => unwrap(api.GET('/api/v1/runs', { params: { query: toQuery(filters) } })),
    // Polling keeps status changes visible without a stream per row.
    refetchInterval: REFRESH_MS,
    placeholderData: keepPreviousData,
  });
  // One request for every row's marker, on the list's own beat.
  const openAlerts = useOpenAlertsByRun(REFRESH_MS);

  const update = (next: RunFilters) => setParams(toParams(next), { replace: true });
  const toggle = (id: number) =>
    setSelected((prev) => {
      const next = new Set(prev);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });

  const count = runs.data?.count ?? 0;
  const { limit, offset } = filters;
  const compareIds = [...selected].sort((a, b) => a - b);

  return (
    <section>
      <div className="page-head">
        <h1>Runs</h1>
        <Link
          className={`button${compareIds.length < 2 ? ' disabled' : ''}`}
          aria-disabled={compareIds.length < 2}
          to={compareIds.length >= 2 ? `/compare?runs=${compareIds.join(',')}` : '#'}
          onClick={(e) => compareIds.length < 2 && e.preventDefault()}
        >
          Compare{compareIds.length ? ` (${compareIds.length})` : ''}
        </Link>
      </div>
      <RunFiltersForm filters={filters} onChange={update} />
      <ColumnPicker shown={columns} onChange={pickColumns} />
      <ErrorNote error={runs.error} />
      {openAlerts.error && <p className="muted">Alert markers unavailable: {openAlerts.error.message}</p>}
      {runs.data && (
        <>
          <RunsTable
            runs={runs.data.data}
            sort={filters.sort}
            onSort={(column) => update({ ...filters, sort: nextSort(filters.sort, column), offset: 0 })}
            selected={selected}
            onToggle={toggle}
            columns={columns}
            openAlerts={openAlerts.data}
          />
          {count === 0 && <p className="muted">No runs match these filters.</p>}
          <nav className="pager" aria-label="Pages">
            <button type="button" disabled={offset === 0} onClick={() => update({ ...filters, offset: Math.max(0, offset - limit) })}>
              Previous
            </button>
            <span>
              {count ? `${offset + 1}–${Math.min(offset + limit, count)} of ${count}` : '0 runs'}
            </span>
            <button type="button" disabled={offset + limit >= count} onClick={() => update({ ...filters, offset: offset + limit })}>
              Next
            </button>
          </nav>
        </>
      )}
      {runs.isPending && <p className="muted">Loading runs…</p>}
    </section>
  );
}
