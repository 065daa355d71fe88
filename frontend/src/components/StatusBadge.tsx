import type { RunStatus } from '../api/types';

export function StatusBadge({ status }: { status: RunStatus | string }) {
  return (
    <span className={`badge badge-${status}`} data-status={status}>
      {status}
    </span>
  );
}
