import { useEffect, useRef, useState, type FormEvent } from 'react';
import type { Me } from '../../api/types';
import { ErrorNote } from '../../components/ErrorNote';
import { formatDate } from '../../lib/format';
import { ConfirmDialog } from '../../components/ConfirmDialog';
import { useConfirmedRemoval } from './confirmedRemoval';
import { Field } from './Field';
import { ProjectScheduling } from './ProjectScheduling';
import {
  canManageMembers, fieldError, FieldApiError, ROLES, unplacedError, useProject, useRemoveMember, useSetMember, type Role,
} from './adminApi';

function AddMemberForm({ project }: { project: string }) {
  const setMember = useSetMember(project);
  const [user, setUser] = useState('');
  const [role, setRole] = useState<Role>('member');
  const error = setMember.error;
  // PUT answers 404 "user 'x' not found" for an unknown name: that belongs next to the user field.
  const userError = fieldError(error, 'user') ?? (error instanceof FieldApiError && error.status === 404 ? error.detail : undefined);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    try {
      await setMember.mutateAsync({ user: user.trim(), role });
      setUser('');
    } catch {
      // shown below
    }
  };
  return (
    <form className="admin-form" onSubmit={submit} aria-labelledby="add-member-title">
      <h3 id="add-member-title">Add a member or change a role</h3>
      <div className="admin-form-row">
        <Field label="User name" value={user} onChange={(e) => setUser(e.target.value)} error={userError} required />
        <div className="field">
          <label htmlFor="member-role">Role</label>
          <select id="member-role" value={role} onChange={(e) => setRole(e.target.value as Role)}>
            {ROLES.map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
        </div>
      </div>
      {!userError && <ErrorNote error={unplacedError(error, ['user', 'role'])} />}
      <button type="submit" disabled={setMember.isPending || user.trim() === ''}>
        Add member
      </button>
    </form>
  );
}

export function ProjectMembers({ me, name }: { me: Me; name: string }) {
  const project = useProject(name);
  const remove = useRemoveMember(name);
  const { confirming, ask: setConfirming, confirm: confirmRemove, cancel: cancelRemove } = useConfirmedRemoval(remove);
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => heading.current?.focus(), [name]);

  const detail = project.data;
  const manage = detail ? canManageMembers(me, detail.role) : false;

  return (
    <>
      <h2 ref={heading} tabIndex={-1}>
        Project {name}
      </h2>
      <ErrorNote error={project.error} />
      {project.isPending && !project.error && <p className="muted">Loading…</p>}
      {detail && (
        <>
          <p className="muted">
            {detail.description || 'No description.'} · created {formatDate(detail.created_at)} · your role:{' '}
            {detail.role ?? 'none (site admin)'}
          </p>
          <h3>Members</h3>
          <table className="admin-table">
            <thead>
              <tr>
                <th scope="col">User</th>
                <th scope="col">Role</th>
                {manage && (
                  <th scope="col">
                    <span className="sr-only">Actions</span>
                  </th>
                )}
              </tr>
            </thead>
            <tbody>
              {detail.members.map((m) => (
                <tr key={m.user} data-member={m.user}>
                  <th scope="row">{m.user}</th>
                  <td>{m.role}</td>
                  {manage && (
                    <td>
                      <button type="button" className="danger" aria-label={`Remove ${m.user}`} onClick={() => setConfirming(m.user)}>
                        Remove
                      </button>
                    </td>
                  )}
                </tr>
              ))}
            </tbody>
          </table>
          {manage ? (
            <AddMemberForm project={name} />
          ) : (
            <p className="muted" data-testid="members-readonly">
              Changing members needs this project&apos;s admin role (or site admin) and a token with the admin scope.
            </p>
          )}
          {/* Keyed: another project's forms start from its own values. */}
          <ProjectScheduling key={name} me={me} detail={detail} />
        </>
      )}
      {confirming && (
        <ConfirmDialog
          title={`Remove ${confirming} from ${name}?`}
          busy={remove.isPending}
          error={remove.error}
          onConfirm={confirmRemove}
          onCancel={cancelRemove}
        >
          <p>They lose access to this project&apos;s runs at once.</p>
        </ConfirmDialog>
      )}
    </>
  );
}
