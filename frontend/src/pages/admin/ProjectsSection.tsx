import { useState, type FormEvent } from 'react';
import { Link, useSearchParams } from 'react-router';
import type { Me } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { formatDate } from '../../lib/format';
import { Field } from './Field';
import { ProjectMembers } from './ProjectMembers';
import { fieldError, isSiteAdmin, unplacedError, useCreateProject, useProjects } from './adminApi';

const projectHref = (name: string) => `?tab=projects&project=${encodeURIComponent(name)}`;

function CreateProjectForm({ onCreated }: { onCreated: (name: string) => void }) {
  const create = useCreateProject();
  const [name, setName] = useState('');
  const [description, setDescription] = useState('');
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    try {
      const project = await create.mutateAsync({ name: name.trim(), description });
      setName('');
      setDescription('');
      onCreated(project.name);
    } catch {
      // shown below
    }
  };
  return (
    <form className="admin-form" onSubmit={submit} aria-labelledby="create-project-title">
      <h2 id="create-project-title">Create a project</h2>
      <div className="admin-form-row">
        <Field
          label="Project name"
          value={name}
          onChange={(e) => setName(e.target.value)}
          error={fieldError(create.error, 'name')}
          hint="Letters, digits, '.', '_' or '-'; up to 64"
        />
        <Field
          label="Description"
          value={description}
          onChange={(e) => setDescription(e.target.value)}
          error={fieldError(create.error, 'description')}
        />
      </div>
      <ErrorNote error={unplacedError(create.error, ['name', 'description'])} />
      <button type="submit" disabled={create.isPending}>
        Create project
      </button>
    </form>
  );
}

export function ProjectsSection({ me }: { me: Me }) {
  const [params, setParams] = useSearchParams();
  const open = params.get('project');
  const projects = useProjects();
  const rows = projects.data?.data ?? [];
  const siteAdmin = isSiteAdmin(me);

  if (open) {
    return (
      <section aria-label={`Project ${open}`}>
        <p>
          <Link to="?tab=projects">← All projects</Link>
        </p>
        <ProjectMembers me={me} name={open} />
      </section>
    );
  }
  return (
    <section aria-labelledby="projects-title">
      <h2 id="projects-title">Projects</h2>
      <ErrorNote error={projects.error} />
      {projects.isPending && !projects.error && <p className="muted">Loading…</p>}
      {projects.data && rows.length === 0 && <p className="muted">You are not a member of any project.</p>}
      {rows.length > 0 && (
        <table className="admin-table">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Description</th>
              <th scope="col">Your role</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((p) => (
              <tr key={p.id} data-project={p.name}>
                <th scope="row">
                  <Link to={projectHref(p.name)}>{p.name}</Link>
                </th>
                <td>{p.description || <span className="muted">—</span>}</td>
                <td>{p.role ?? <span className="muted">none (site admin)</span>}</td>
                <td>{formatDate(p.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {siteAdmin ? (
        <CreateProjectForm onCreated={(name) => setParams({ tab: 'projects', project: name })} />
      ) : (
        <p className="muted">Only a site admin signed in with an admin-scoped token can create projects.</p>
      )}
    </section>
  );
}
