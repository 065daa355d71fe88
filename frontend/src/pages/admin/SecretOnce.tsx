import { useEffect, useId, useRef, useState } from 'react';

interface Props {
  secret: string;
  /** Whose token this is, e.g. "token 'ci' for alice". */
  what: string;
  onDismiss: () => void;
}

/** The secret of a just-created token, shown this once; the parent forgets it on dismiss or unmount. */
export function SecretOnce({ secret, what, onDismiss }: Props) {
  const ref = useRef<HTMLTextAreaElement>(null);
  const [status, setStatus] = useState('');
  const id = useId();
  useEffect(() => {
    ref.current?.focus();
    ref.current?.select();
  }, [secret]);

  const copy = async () => {
    try {
      if (!navigator.clipboard) throw new Error('no clipboard');
      await navigator.clipboard.writeText(secret);
      setStatus('Copied to the clipboard.');
    } catch {
      // Insecure origins and some browsers refuse clipboard writes: select it for a manual copy.
      ref.current?.focus();
      ref.current?.select();
      setStatus('Could not copy here: the secret is selected, press Ctrl+C (⌘C on a Mac).');
    }
  };

  return (
    <section className="secret-once" aria-labelledby={`${id}-title`}>
      <h3 id={`${id}-title`}>New secret for {what}</h3>
      <p className="secret-warning">
        <strong>This is the only time it is shown.</strong> Copy it now; rlplane keeps only a hash and cannot show it again.
      </p>
      <label htmlFor={id} className="sr-only">
        Token secret
      </label>
      <div className="secret-row">
        <textarea
          id={id}
          ref={ref}
          data-testid="new-token-secret"
          readOnly
          rows={1}
          spellCheck={false}
          value={secret}
          onFocus={(e) => e.currentTarget.select()}
        />
        <button type="button" onClick={copy}>
          Copy
        </button>
        <button type="button" onClick={onDismiss}>
          Done, hide it
        </button>
      </div>
      <p role="status" className="muted">
        {status}
      </p>
    </section>
  );
}
