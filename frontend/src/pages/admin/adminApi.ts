import { type QueryClient, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { api, ApiError, detailText } from '../../api/client';
import { queryKeys } from '../../api/queryKeys';
import type { components } from '../../api/schema';
import type { Me } from '../../api/types';

type S = components['schemas'];
export type Scope = S['TokenPublic']['scopes'][number];
export type Role = S['MemberPublic']['role'];
export type Token = S['TokenPublic'];
export type TokenCreate = S['TokenCreate'];
export type TokenCreated = S['TokenCreated'];
export type Project = S['ProjectPublic'];
export type ProjectDetail = S['ProjectDetail'];
export type Quota = S['QuotaPublic'];
export type SchedulingSet = S['SchedulingSet'];
export type User = S['UserPublic'];
export type UserCreate = S['UserCreate'];

// A Record keyed by the schema's Scope/Role literals: adding one to the API fails the typecheck here.
export const SCOPE_HELP: Record<Scope, string> = {
  read: 'read runs, metrics and projects',
  write: 'also create and change runs (implies read)',
  admin: 'also manage projects, members and users (implies write)',
  worker: 'for a worker process only; cannot be combined',
};
export const SCOPES = Object.keys(SCOPE_HELP) as Scope[];
const ROLE_HELP: Record<Role, true> = { viewer: true, member: true, admin: true };
export const ROLES = Object.keys(ROLE_HELP) as Role[];

const IMPLIES: Record<Scope, Scope[]> = {
  read: ['read'], write: ['write', 'read'], admin: ['admin', 'write', 'read'], worker: ['worker'],
};

/** Scopes the caller's own token carries, with implied ones (a token cannot grant more). */
export function grantedScopes(me: Me): Set<Scope> {
  return new Set(me.scopes.flatMap((s) => IMPLIES[s]));
}

/** Site admin acting through an admin-scoped token: what the API's require_site_admin asks. */
export function isSiteAdmin(me: Me): boolean {
  return me.user.is_site_admin && grantedScopes(me).has('admin');
}

/** May this caller change the members of a project whose role for them is `role`? */
export function canManageMembers(me: Me, role: Role | null | undefined): boolean {
  return grantedScopes(me).has('admin') && (me.user.is_site_admin || role === 'admin');
}

/** An ApiError that also keeps 422 messages by field name (the last part of each `loc`). */
export class FieldApiError extends ApiError {
  constructor(
    status: number,
    detail: string,
    readonly fields: Record<string, string>,
  ) {
    super(status, detail);
  }
}

export function fieldErrors(body: unknown): Record<string, string> {
  const detail = (body as { detail?: unknown } | null)?.detail;
  const out: Record<string, string> = {};
  if (!Array.isArray(detail)) return out;
  for (const e of detail as { loc?: unknown[]; msg?: string }[]) {
    const field = e.loc?.[e.loc.length - 1];
    if (typeof field === 'string' && !(field in out)) out[field] = e.msg ?? 'invalid';
  }
  return out;
}

export function fieldError(error: unknown, field: string): string | undefined {
  return error instanceof FieldApiError ? error.fields[field] : undefined;
}

async function call<T>(promise: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await promise;
  if (!response.ok) throw new FieldApiError(response.status, detailText(error), fieldErrors(error));
  return data as T;
}

/** Users and projects answer 409 only for a taken name: show it beside the name field. */
async function nameConflict<T>(promise: Promise<T>): Promise<T> {
  try {
    return await promise;
  } catch (error) {
    if (error instanceof FieldApiError && error.status === 409) throw new FieldApiError(409, error.detail, { name: error.detail });
    throw error;
  }
}

export function useTokens(all: boolean) {
  return useQuery({ queryKey: queryKeys.tokens.list(all), queryFn: () => call(api.GET('/api/v1/tokens', { params: { query: { all_users: all } } })) });
}

export function useCreateToken() {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (body: TokenCreate) => call(api.POST('/api/v1/tokens', { body })),
    gcTime: 0, // the answer carries the secret: keep it in no cache longer than the form needs
    onSuccess: () => client.invalidateQueries({ queryKey: queryKeys.tokens.all() }),
  });
}

export function useRevokeToken() {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (id: number) => call(api.DELETE('/api/v1/tokens/{token_id}', { params: { path: { token_id: id } } })),
    onSuccess: (revoked) => {
      // Show the revoked row at once in every cached list, then refresh from the server.
      for (const all of [false, true]) {
        client.setQueryData<S['TokenList']>(queryKeys.tokens.list(all), (old) =>
          old && { ...old, data: old.data.map((t) => (t.id === revoked.id ? revoked : t)) },
        );
      }
      return client.invalidateQueries({ queryKey: queryKeys.tokens.all() });
    },
  });
}

export function useProjects() {
  return useQuery({ queryKey: queryKeys.projects.list(), queryFn: () => call(api.GET('/api/v1/projects')), staleTime: 60_000 });
}

export function useProject(name: string) {
  return useQuery({
    queryKey: queryKeys.projects.detail(name),
    queryFn: () => call(api.GET('/api/v1/projects/{name}', { params: { path: { name } } })),
  });
}

/** The projects list and `me` carry the caller's own role in each project: refresh both after a change. */
function rolesChanged(client: QueryClient) {
  return Promise.all([client.invalidateQueries({ queryKey: queryKeys.projects.list() }), client.invalidateQueries({ queryKey: queryKeys.me() })]);
}

export function useCreateProject() {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (body: S['ProjectCreate']) => nameConflict(call(api.POST('/api/v1/projects', { body }))),
    onSuccess: () => rolesChanged(client),
  });
}

export function useSetMember(project: string) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: ({ user, role }: { user: string; role: Role }) =>
      call(api.PUT('/api/v1/projects/{name}/members/{user}', { params: { path: { name: project, user } }, body: { role } })),
    onSuccess: (detail) => {
      client.setQueryData(queryKeys.projects.detail(project), detail);
      return rolesChanged(client);
    },
  });
}

export function useRemoveMember(project: string) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (user: string) =>
      call(api.DELETE('/api/v1/projects/{name}/members/{user}', { params: { path: { name: project, user } } })),
    onSuccess: () => Promise.all([client.invalidateQueries({ queryKey: queryKeys.projects.detail(project) }), rolesChanged(client)]),
  });
}

/** Scheduling and quotas: the answer is the project's new detail; the list carries the scheduling values too. */
export function useSetScheduling(project: string) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (body: SchedulingSet) => call(api.PATCH('/api/v1/projects/{name}/scheduling', { params: { path: { name: project } }, body })),
    onSuccess: (detail) => {
      client.setQueryData(queryKeys.projects.detail(project), detail);
      return client.invalidateQueries({ queryKey: queryKeys.projects.list() });
    },
  });
}

export function useSetQuota(project: string) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: ({ queue, ...body }: S['QuotaSet'] & { queue: string }) =>
      call(api.PUT('/api/v1/projects/{name}/quotas/{queue}', { params: { path: { name: project, queue } }, body })),
    onSuccess: (detail) => {
      client.setQueryData(queryKeys.projects.detail(project), detail);
      // The Queues page shows each project's quota beside what it holds.
      return client.invalidateQueries({ queryKey: queryKeys.queues.list() });
    },
  });
}

export function useRemoveQuota(project: string) {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (queue: string) =>
      call(api.DELETE('/api/v1/projects/{name}/quotas/{queue}', { params: { path: { name: project, queue } } })),
    onSuccess: () =>
      Promise.all([
        client.invalidateQueries({ queryKey: queryKeys.projects.detail(project) }),
        client.invalidateQueries({ queryKey: queryKeys.queues.list() }),
      ]),
  });
}

export function useUsers(enabled: boolean) {
  return useQuery({ queryKey: queryKeys.users.list(), queryFn: () => call(api.GET('/api/v1/users')), enabled });
}

export function useCreateUser() {
  const client = useQueryClient();
  return useMutation({
    mutationFn: (body: UserCreate) => nameConflict(call(api.POST('/api/v1/users', { body }))),
    onSuccess: () => client.invalidateQueries({ queryKey: queryKeys.users.list() }),
  });
}

/** The error, unless every message it carries is already shown beside one of `shown` fields. */
export function unplacedError(error: unknown, shown: string[]): unknown {
  if (!(error instanceof FieldApiError)) return error;
  const fields = Object.keys(error.fields);
  return fields.length > 0 && fields.every((f) => shown.includes(f)) ? null : error;
}
