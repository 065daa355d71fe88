import { stringify } from 'yaml';
import type { RunEnvironment } from './environment';
import { shellLine } from './environment';
import { GitStateView } from './GitState';
import { Packages } from './Packages';

function Field({ label, value, title }: { label: string; value: string | null; title?: string }) {
  if (!value) return null;
  return (
    <div>
      <dt>{label}</dt>
      <dd title={title}>{value}</dd>
    </div>
  );
}

/** Where the script ran, as its SDK recorded it (the newest attempt's record). */
export function EnvironmentSection({ environment }: { environment: RunEnvironment | null }) {
  if (!environment) {
    return <p className="muted">Not recorded yet: the script's rlplane.init() records it when it starts (docs/sdk.md).</p>;
  }
  return (
    <>
      <dl className="kv" aria-label="Where it ran">
        <Field label="python" value={environment.python} title={environment.executable ?? undefined} />
        <Field label="hostname" value={environment.hostname} />
        <Field label="platform" value={environment.platform} />
        <Field label="cwd" value={environment.cwd} />
        <Field label="argv" value={environment.argv.length ? shellLine(environment.argv) : null} />
      </dl>
      {environment.git && <GitStateView git={environment.git} label="Script's checkout" />}
      {environment.config && (
        <details className="recorded-config">
          <summary>Config the script recorded</summary>
          <pre className="spec">{stringify(environment.config, { lineWidth: 0 })}</pre>
        </details>
      )}
      <h3>Packages</h3>
      <Packages packages={environment.packages} />
    </>
  );
}
