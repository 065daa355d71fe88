import { useEffect, useId, useRef, type ReactNode } from 'react';
import { ErrorNote } from './ErrorNote';
import './confirmDialog.css';

interface Props {
  title: string;
  children: ReactNode;
  confirmLabel?: string;
  /** The safe choice's label; a page whose action is itself called Cancel names it otherwise. */
  dismissLabel?: string;
  busy?: boolean;
  error?: unknown;
  onConfirm: () => void;
  onCancel: () => void;
}

/**
 * A native modal <dialog>, mounted only while a confirmation is pending: Escape cancels, focus starts
 * on the safe choice and returns to whatever had it before.
 */
export function ConfirmDialog({ title, children, confirmLabel = 'Confirm', dismissLabel = 'Cancel', busy, error, onConfirm, onCancel }: Props) {
  const ref = useRef<HTMLDialogElement>(null);
  const titleId = useId();
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
      className="confirm-dialog"
      aria-labelledby={titleId}
      onCancel={(e) => {
        e.preventDefault();
        onCancel();
      }}
    >
      <h2 id={titleId}>{title}</h2>
      <div>{children}</div>
      <ErrorNote error={error} />
      <div className="confirm-dialog-actions">
        <button type="button" data-autofocus onClick={onCancel}>
          {dismissLabel}
        </button>
        <button type="button" className="danger" onClick={onConfirm} disabled={busy}>
          {busy ? 'Working…' : confirmLabel}
        </button>
      </div>
    </dialog>
  );
}
