import { useState, type FormEvent } from 'react';
import type { Me } from '../../api/types';
import { ConfirmDialog } from '../../components/ConfirmDialog';
import { ErrorNote } from '../../components/ErrorNote';
import { priorityName } from '../../lib/priority';
import { useConfirmedRemoval } from './confirmedRemoval';
import { Field } from './Field';
import {
  fieldError, isSiteAdmin, unplacedError, useRemoveQuota, useSetQuota, useSetScheduling, type ProjectDetail, type Quota, type SchedulingSet,
} from './adminApi';

const PRIORITY_HINT = '0-100, or low, normal, high, urgent';

/**
 * A priority as typed: a number, or a name the API maps (low, normal, ...) and otherwise explains; the generated
 * type knows only the number. Empty: left out, so it stays.
 */
function priorityInput(text: string): number | undefined {
  const t = text.trim();
  if (t === '') return undefined;
  return /^-?\d+$/.test(t) ? Number(t) : (t as unknown as number);
}

/** Empty: left out (stays); anything else as a number, for the API to judge. */
function numberInput(text: string): number | undefined {
  return text.trim() === '' ? undefined : Number(text);
}

/** Empty: null, no limit. */
function limitInput(text: string): number | null {
  return text.trim() === '' ? null : Number(text);
}

const schedulingFields = (d: ProjectDetail) => ({
  defaultPriority: String(d.default_priority),
  memberMax: String(d.member_max_priority),
  share: String(d.share),
});

function SchedulingForm({ detail }: { detail: ProjectDetail }) {
  const setScheduling = useSetScheduling(detail.name);
  const [values, setValues] = useState(() => schedulingFields(detail));
  const error = setScheduling.error;
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const body: SchedulingSet = {
      default_priority: priorityInput(values.defaultPriority),
      member_max_priority: priorityInput(values.memberMax),
      share: numberInput(values.share),
    };
    try {
      const saved = await setScheduling.mutateAsync(body);
      setValues(schedulingFields(saved)); // a name typed shows as the number it stands for
    } catch {
      // shown below
    }
  };
  return (
    <form className="admin-form" onSubmit={submit} aria-labelledby="scheduling-title">
      <h3 id="scheduling-title">Change scheduling</h3>
      <div className="admin-form-row">
        <Field
          label="Default priority"
          value={values.defaultPriority}
          onChange={(e) => setValues({ ...values, defaultPriority: e.target.value })}
          error={fieldError(error, 'default_priority')}
          hint={`A run's priority when its spec names none: ${PRIORITY_HINT}`}
        />
        <Field
          label="Member max priority"
          value={values.memberMax}
          onChange={(e) => setValues({ ...values, memberMax: e.target.value })}
          error={fieldError(error, 'member_max_priority')}
          hint="The highest its members may ask for; above it needs the project's admin role"
        />
        <Field
          label="Share"
          type="number"
          step="any"
          value={values.share}
          onChange={(e) => setValues({ ...values, share: e.target.value })}
          error={fieldError(error, 'share')}
          hint="Its weight in fair share between projects (more than 0; 1 is even)"
        />
      </div>
      <ErrorNote error={unplacedError(error, ['default_priority', 'member_max_priority', 'share'])} />
      <button type="submit" disabled={setScheduling.isPending}>
        Save scheduling
      </button>
    </form>
  );
}

function QuotaForm({ project }: { project: string }) {
  const setQuota = useSetQuota(project);
  const [queue, setQueue] = useState('');
  const [maxGpus, setMaxGpus] = useState('');
  const [maxRuns, setMaxRuns] = useState('');
  const error = setQuota.error;
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    try {
      await setQuota.mutateAsync({ queue: queue.trim(), max_gpus: limitInput(maxGpus), max_runs: limitInput(maxRuns) });
      setQueue('');
      setMaxGpus('');
      setMaxRuns('');
    } catch {
      // shown below
    }
  };
  return (
    <form className="admin-form" onSubmit={submit} aria-labelledby="quota-title">
      <h3 id="quota-title">Add a quota or change one</h3>
      <div className="admin-form-row">
        <Field label="Queue" value={queue} onChange={(e) => setQueue(e.target.value)} error={fieldError(error, 'queue')} required />
        <Field
          label="Max GPUs"
          type="number"
          min={0}
          step={1}
          value={maxGpus}
          onChange={(e) => setMaxGpus(e.target.value)}
          error={fieldError(error, 'max_gpus')}
          hint="On a CPU queue, worker slots; empty: no limit"
        />
        <Field
          label="Max runs"
          type="number"
          min={0}
          step={1}
          value={maxRuns}
          onChange={(e) => setMaxRuns(e.target.value)}
          error={fieldError(error, 'max_runs')}
          hint="Active at once; empty: no limit"
        />
      </div>
      <ErrorNote error={unplacedError(error, ['queue', 'max_gpus', 'max_runs'])} />
      <button type="submit" disabled={setQuota.isPending || queue.trim() === ''}>
        Set quota
      </button>
    </form>
  );
}

/** "3 of 8", or "3 (no limit)". */
const usedOf = (used: number, max: number | null | undefined) => (max == null ? `${used} (no limit)` : `${used} of ${max}`);

function QuotasTable({ quotas, manage, onRemove }: { quotas: readonly Quota[]; manage: boolean; onRemove: (queue: string) => void }) {
  return (
    <table className="admin-table">
      <thead>
        <tr>
          <th scope="col">Queue</th>
          <th scope="col" className="num" title="On a CPU queue, worker slots">
            GPUs held
          </th>
          <th scope="col" className="num">Runs active</th>
          {manage && (
            <th scope="col">
              <span className="sr-only">Actions</span>
            </th>
          )}
        </tr>
      </thead>
      <tbody>
        {quotas.map((q) => (
          <tr key={q.queue} data-quota={q.queue}>
            <th scope="row">
              <code>{q.queue}</code>
            </th>
            <td className="num">{usedOf(q.used_gpus, q.max_gpus)}</td>
            <td className="num">{usedOf(q.used_runs, q.max_runs)}</td>
            {manage && (
              <td>
                <button type="button" className="danger" aria-label={`Remove the ${q.queue} quota`} onClick={() => onRemove(q.queue)}>
                  Remove
                </button>
              </td>
            )}
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** A project's place in sharing the cluster (docs/scheduling.md): everyone who sees the project sees it, site admins set it. */
export function ProjectScheduling({ me, detail }: { me: Me; detail: ProjectDetail }) {
  const manage = isSiteAdmin(me);
  const remove = useRemoveQuota(detail.name);
  const { confirming, ask: setConfirming, confirm: confirmRemove, cancel: cancelRemove } = useConfirmedRemoval(remove);
  const quotas = detail.quotas ?? [];

  return (
    <>
      <h3>Scheduling</h3>
      <p data-testid="scheduling-summary">
        Runs without a priority get <strong>{priorityName(detail.default_priority)}</strong>; members may ask for up to{' '}
        <strong>{priorityName(detail.member_max_priority)}</strong>; fair share <strong>{detail.share}</strong>.
      </p>
      {manage && <SchedulingForm detail={detail} />}
      <h3>Quotas</h3>
      {quotas.length === 0 ? (
        <p className="muted">No quotas: its runs may hold any part of any queue.</p>
      ) : (
        <QuotasTable quotas={quotas} manage={manage} onRemove={setConfirming} />
      )}
      {manage ? (
        <QuotaForm project={detail.name} />
      ) : (
        <p className="muted" data-testid="scheduling-readonly">
          Changing scheduling and quotas needs a site admin signed in with an admin-scoped token.
        </p>
      )}
      {confirming && (
        <ConfirmDialog
          title={`Remove the ${confirming} quota of ${detail.name}?`}
          busy={remove.isPending}
          error={remove.error}
          onConfirm={confirmRemove}
          onCancel={cancelRemove}
        >
          <p>Its runs may then hold any number of {confirming}&apos;s GPUs and runs at once.</p>
        </ConfirmDialog>
      )}
    </>
  );
}
