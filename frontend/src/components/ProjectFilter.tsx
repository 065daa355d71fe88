import { useId } from 'react';
import { useQuery } from '@tanstack/react-query';
import { api, unwrap } from '../api/client';
import { queryKeys } from '../api/queryKeys';

/** A project picker for a list page: '' is every project the user can see. */
export function ProjectFilter({ project, onChange }: { project: string; onChange: (project: string) => void }) {
  const id = useId();
  const projects = useQuery({
    queryKey: queryKeys.projects.list(),
    queryFn: () => unwrap(api.GET('/api/v1/projects')),
    staleTime: 60_000,
  });
  const names = projects.data?.data.map((p) => p.name) ?? [];
  return (
    <form className="filters" role="search" onSubmit={(e) => e.preventDefault()}>
      <div className="field">
        <label htmlFor={id}>Project</label>
        <select id={id} value={project} onChange={(e) => onChange(e.target.value)}>
          <option value="">All projects</option>
          {/* A project from a shared URL stays choosable before (or without) the projects list. */}
          {[...names, ...(project && !names.includes(project) ? [project] : [])].map((name) => (
            <option key={name} value={name}>
              {name}
            </option>
          ))}
        </select>
      </div>
    </form>
  );
}
