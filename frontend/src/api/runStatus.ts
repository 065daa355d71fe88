import type { RunStatus } from './types';

/**
 * Where each status word stands, as the API's state machine says (rlplane/status.py, held equal by
 * tests/test_dashboard_contract.py). Active: a worker holds the run, so it logs metrics, samples and
 * checkpoints. Terminal: nothing moves it on unless someone resumes it. Waiting, neither: queued for a
 * worker, or lost for the moment before the API requeues or fails it; both still change on their own.
 * A Record over the schema's status words, so a status the API adds fails the typecheck here.
 */
const PHASE: Record<RunStatus, 'waiting' | 'active' | 'terminal'> = {
  queued: 'waiting',
  starting: 'active',
  running: 'active',
  succeeded: 'terminal',
  failed: 'terminal',
  cancelling: 'active',
  cancelled: 'terminal',
  lost: 'waiting',
};

export const STATUSES = Object.keys(PHASE) as RunStatus[];
const ACTIVE: ReadonlySet<RunStatus> = new Set(STATUSES.filter((s) => PHASE[s] === 'active'));
const TERMINAL: ReadonlySet<RunStatus> = new Set(STATUSES.filter((s) => PHASE[s] === 'terminal'));
// What POST /cancel changes: a cancelling run is already on its way.
export const CANCELLABLE: ReadonlySet<RunStatus> = new Set(['queued', 'starting', 'running']);

/** New metrics, samples or checkpoints may arrive: worth polling for them. */
export const isActive = (status: RunStatus) => ACTIVE.has(status);
/** Ended: only someone's resume changes it, so its status is not worth polling. */
export const isTerminal = (status: RunStatus) => TERMINAL.has(status);
