import { useMemo, useState } from 'react';
import { specSource } from '../../lib/specText';
import { useRunContext } from './context';

const ORIGIN = {
  submitted: 'As submitted.',
  json: 'As submitted (JSON, shown as YAML).',
  stored: 'The stored spec with every default filled in: this run is from before specs were kept as submitted.',
};

export function SpecTab() {
  const { run } = useRunContext();
  const { text, origin } = useMemo(() => specSource(run), [run]);
  const [copied, setCopied] = useState('');
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setCopied('Copied');
    } catch {
      setCopied('Copy failed: select the text and copy it by hand');
    }
  };
  return (
    <div className="spec-tab">
      <div className="row">
        <button type="button" onClick={copy}>
          Copy
        </button>
        <span className="muted" data-testid="spec-origin">
          {ORIGIN[origin]}
        </span>
        <span role="status" className="muted">
          {copied}
        </span>
      </div>
      <pre className="spec" aria-label="Run spec (YAML)" tabIndex={0}>
        {text}
      </pre>
    </div>
  );
}
