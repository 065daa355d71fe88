import { useMemo, useState } from 'react';
import { stringify } from 'yaml';
import { useRunContext } from './context';

export function SpecTab() {
  const { run } = useRunContext();
  const text = useMemo(() => stringify(run.spec, { lineWidth: 0 }), [run.spec]);
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
