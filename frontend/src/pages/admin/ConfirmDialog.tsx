import { useEffect, useRef, type ReactNode } from 'react';
import { ErrorNote } from '../../components/ErrorNote';

interface Props {
  title: string;
  children: ReactNode;
  confirmLabel?: string;
  busy?: boolean;
  error?: unknown;
  onConfirm: () => void;
  onCancel: () => void;
}

/**
 * A native modal <dialog>, mounted only while a confirmation is pending: Escape cancels, focus starts
 * on Cancel (the safe choice) and returns to whatever had it before.
 */
export function ConfirmDialog({ title, children, confirmLabel = 'Confirm', busy, error, onConfirm, onCancel }: Props) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    const before = document.activeElement as HTMLElement | null;
    if (dialog && !dialog.open) {
      if (typeof dialog.showModal === 'function') dialog.showModal();
      else dialog.setAttribute('open', ''); // environments without modal support (jsdom)
    }
    dialog?.querySelector<HTMLButtonElement>('button[data-autofocus]')?.focus();
    return () => {
      if (dialog?.open && typeof dialog.close === 'function') dialog.close();
      before?.focus?.();
    };
  }, []);
  return (
    <dialog
      ref={ref}
      className="admin-dialog"
      aria-labelledby="admin-dialog-title"
      onCancel={(e) => {
        e.preventDefault();
        onCancel();
      }}
    >
      <h2 id="admin-dialog-title">{title}</h2>
      <div>{children}</div>
      <ErrorNote error={error} />
      <div className="admin-dialog-actions">
        <button type="button" data-autofocus onClick={onCancel}>
          Cancel
        </button>
        <button type="button" className="danger" onClick={onConfirm} disabled={busy}>
          {busy ? 'Working…' : confirmLabel}
        </button>
      </div>
    </dialog>
  );
}
