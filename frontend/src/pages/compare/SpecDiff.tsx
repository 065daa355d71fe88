import { useMemo, useState } from 'react';
import type { RunDetail } from '../../api/types';
import { diffSpecs, flattenSpec, sameValue } from './specDiff';

export function SpecDiff({ runs }: { runs: readonly RunDetail[] }) {
  const [showAll, setShowAll] = useState(false);
  const flat = useMemo(() => runs.map((r) => flattenSpec(r.spec)), [runs]);
  const rows = useMemo(() => diffSpecs(flat, showAll), [flat, showAll]);
  const differing = showAll ? rows.filter((r) => r.differs).length : rows.length;
  return (
    <section className="spec-diff" aria-label="Spec differences">
      <div className="spec-diff-head">
        <h2>Spec differences</h2>
        <span className="muted">
          {differing} field{differing === 1 ? '' : 's'} differ
        </span>
        <label className="check">
          <input type="checkbox" checked={showAll} onChange={(e) => setShowAll(e.target.checked)} />
          Show all fields
        </label>
      </div>
      {rows.length === 0 ? (
        <p className="muted">The specs are identical.</p>
      ) : (
        <div className="spec-diff-scroll">
          <table>
            <thead>
              <tr>
                <th scope="col">Field</th>
                {runs.map((r) => (
                  <th scope="col" key={r.id}>
                    #{r.id} {r.name}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map((row) => (
                <tr key={row.path} className={row.differs ? 'differs' : undefined} data-path={row.path}>
                  <th scope="row">
                    <code>{row.path}</code>
                    {row.differs && showAll && <span className="sr-only"> (differs)</span>}
                  </th>
                  {row.values.map((v, i) => (
                    <td key={runs[i]!.id} className={row.differs && !sameValue(v, row.values[0]) ? 'cell-differs' : undefined}>
                      {v === undefined ? <span className="muted">(absent)</span> : <code>{v}</code>}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
