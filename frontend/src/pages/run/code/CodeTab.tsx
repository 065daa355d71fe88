import { useMemo } from 'react';
import { stringify } from 'yaml';
import { useRunContext } from '../context';
import { commandOf } from '../command';
import { CodeSection } from './CodeSection';
import { environmentOf, shellLine } from './environment';
import { EnvironmentSection } from './EnvironmentSection';
import './code.css';

/** A command run's script: its command line, its code (and that code's git state) and where it ran. */
export function CodeTab() {
  const { run } = useRunContext();
  const command = commandOf(run);
  const environment = useMemo(() => environmentOf(run.environment), [run.environment]);
  const external = command?.external === true;
  const argv = command?.argv ?? [];
  const envNames = Object.keys(command?.env ?? {});
  const config = command?.config ?? {};
  return (
    <div className="code-tab">
      <section aria-labelledby="code-command">
        <h2 id="code-command">Command</h2>
        {command ? (
          <>
            <pre className="spec" aria-label="Command line">
              {argv.length ? shellLine(argv) : '(none)'}
            </pre>
            <p className="muted">
              {external
                ? 'As its script was started, outside any worker.'
                : 'As written: {dotted.path} placeholders take the spec’s values when a worker starts it.'}
            </p>
            <dl className="kv">
              <div>
                <dt>environment variables</dt>
                <dd data-testid="env-names">{envNames.length ? envNames.join(', ') : <span className="muted">none set</span>}</dd>
              </div>
              {!external && (
                <div>
                  <dt>stop grace</dt>
                  <dd>{command.stop_grace_s} s</dd>
                </div>
              )}
            </dl>
            {Object.keys(config).length > 0 && (
              <details className="command-config" open>
                <summary>command.config</summary>
                <pre className="spec">{stringify(config, { lineWidth: 0 })}</pre>
              </details>
            )}
          </>
        ) : (
          <p className="muted">Not a command run: its spec has no command.</p>
        )}
      </section>
      {command && (
        <section aria-labelledby="code-code">
          <h2 id="code-code">Code</h2>
          <CodeSection code={command.code} external={external} />
        </section>
      )}
      <section aria-labelledby="code-environment">
        <h2 id="code-environment">Environment</h2>
        <EnvironmentSection environment={environment} />
      </section>
    </div>
  );
}
