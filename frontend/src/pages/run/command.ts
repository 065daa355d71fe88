import type { CommandOptions, RunDetail } from '../../api/types';

/** A command run's `command` section (the user's own script); null for the other algorithms. */
export function commandOf(run: Pick<RunDetail, 'algorithm' | 'spec'>): CommandOptions | null {
  if (run.algorithm !== 'command') return null;
  const command = run.spec.command;
  return command && typeof command === 'object' ? (command as CommandOptions) : null;
}

/**
 * A run its script started itself through the SDK (rlplane.init outside any worker): no worker can run it
 * again, so the API refuses to resume it, and it ends when the script says so.
 */
export function isExternal(run: Pick<RunDetail, 'algorithm' | 'spec'>): boolean {
  return commandOf(run)?.external === true;
}

/** The run page shows its "Code & environment" tab for these. */
export function hasCodeTab(run: Pick<RunDetail, 'algorithm' | 'spec' | 'environment'>): boolean {
  return run.algorithm === 'command' || run.environment != null;
}
