import { useMemo, useState } from 'react';
import { filterPackages } from './environment';

/** The installed packages (hundreds of them): a name filter and a count of what it leaves. */
export function Packages({ packages }: { packages: Array<[string, string]> }) {
  const [query, setQuery] = useState('');
  const shown = useMemo(() => filterPackages(packages, query), [packages, query]);
  if (!packages.length) return <p className="muted">No packages recorded.</p>;
  return (
    <div className="packages">
      <div className="packages-bar">
        <label htmlFor="package-filter">Filter packages</label>
        <input id="package-filter" type="search" value={query} placeholder="name, e.g. torch" onChange={(e) => setQuery(e.target.value)} />
        <span className="muted" role="status" data-testid="package-count">
          {shown.length === packages.length ? `${packages.length} packages` : `${shown.length} of ${packages.length} packages`}
        </span>
      </div>
      <div className="packages-scroll">
        <table aria-label="Installed packages">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Version</th>
            </tr>
          </thead>
          <tbody>
            {shown.map(([name, version]) => (
              <tr key={name}>
                <td>{name}</td>
                <td className="num">{version}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  );
}
