import { useState } from 'react';
import { useLocation } from 'react-router';

interface Warning {
  field: string;
  message: string;
}

/** The warnings of the submit that just created this run (New run hands them over as it navigates here). */
export function SubmitWarnings() {
  const state = useLocation().state as { warnings?: Warning[] } | null;
  const [dismissed, setDismissed] = useState(false);
  const warnings = state?.warnings ?? [];
  if (dismissed || !warnings.length) return null;
  return (
    <div className="submit-warnings" role="status">
      <p>Submitted with {warnings.length === 1 ? 'a warning' : `${warnings.length} warnings`}:</p>
      <ul>
        {warnings.map((w, i) => (
          <li key={`${w.field}-${i}`}>
            {w.field && <code>{w.field}</code>} {w.field && '— '}
            {w.message}
          </li>
        ))}
      </ul>
      <button type="button" onClick={() => setDismissed(true)}>
        Dismiss
      </button>
    </div>
  );
}
