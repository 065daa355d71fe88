import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import { STATUSES } from '../../api/runStatus';
import { ALGORITHMS } from '../../api/types';
import type { RunFilters } from './filters';

interface Props {
  filters: RunFilters;
  onChange: (next: RunFilters) => void;
}

function toggle<T>(list: readonly T[], item: T): T[] {
  return list.includes(item) ? list.filter((x) => x !== item) : [...list, item];
}

export function RunFiltersForm({ filters, onChange }: Props) {
  const projects = useQuery({
    queryKey: queryKeys.projects.list(),
    queryFn: () => unwrap(api.GET('/api/v1/projects')),
    staleTime: 60_000,
  });
  // Any filter change starts again at the first page.
  const set = (patch: Partial<RunFilters>) => onChange({ ...filters, ...patch, offset: 0 });

  return (
    <form className="filters" role="search" onSubmit={(e) => e.preventDefault()}>
      <div className="field">
        <label htmlFor="run-search">Name</label>
        <input id="run-search" type="search" value={filters.q} onChange={(e) => set({ q: e.target.value })} placeholder="substring" />
      </div>
      <div className="field">
        <label htmlFor="run-project">Project</label>
        <select id="run-project" value={filters.project} onChange={(e) => set({ project: e.target.value })}>
          <option value="">All projects</option>
          {projects.data?.data.map((p) => (
            <option key={p.id} value={p.name}>
              {p.name}
            </option>
          ))}
          {filters.project && !projects.data?.data.some((p) => p.name === filters.project) && (
            <option value={filters.project}>{filters.project}</option>
          )}
        </select>
      </div>
      <fieldset>
        <legend>Status</legend>
        {STATUSES.map((s) => (
          <label key={s} className="check">
            <input type="checkbox" checked={filters.status.includes(s)} onChange={() => set({ status: toggle(filters.status, s) })} />
            {s}
          </label>
        ))}
      </fieldset>
      <fieldset>
        <legend>Algorithm</legend>
        {ALGORITHMS.map((a) => (
          <label key={a} className="check">
            <input
              type="checkbox"
              checked={filters.algorithm.includes(a)}
              onChange={() => set({ algorithm: toggle(filters.algorithm, a) })}
            />
            {a}
          </label>
        ))}
      </fieldset>
    </form>
  );
}
