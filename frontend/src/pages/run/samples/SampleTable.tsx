import type { Sample } from '../../../api/types';
import { formatNumber } from '../../../lib/format';
import type { SampleGroup } from './groups';

const REWARD_COMPONENT = 'reward/';

/** Every reward component any response of the step has, in name order: one column each. */
function componentNames(groups: readonly SampleGroup[]): string[] {
  const names = new Set<string>();
  for (const g of groups) for (const s of g.rollouts) for (const name of Object.keys(s.scores)) if (name.startsWith(REWARD_COMPONENT)) names.add(name);
  return [...names].sort();
}

const shown = (value: number | string | null | undefined) => (typeof value === 'number' ? formatNumber(value) : (value ?? '—'));

/**
 * One row per response, a step's many short answers on one screen. Each group is its own row
 * group with its prompt spanning its rows, so a GRPO group is read together (a reward-sorted
 * step keeps its groups whole too: groupSamples does).
 */
export function SampleTable({ groups }: { groups: readonly SampleGroup[] }) {
  const components = componentNames(groups);
  return (
    <table className="sample-table">
      <thead>
        <tr>
          <th scope="col">Prompt</th>
          <th scope="col" className="num">#</th>
          <th scope="col">Answer</th>
          <th scope="col" className="num">Reward</th>
          {components.map((name) => (
            <th scope="col" className="num" key={name}>
              {name}
            </th>
          ))}
          <th scope="col" className="num">Advantage</th>
          <th scope="col" className="num">Length</th>
        </tr>
      </thead>
      {groups.map((g) => (
        <tbody key={g.key} data-prompt-hash={g.promptHash}>
          {g.rollouts.map((s, i) => (
            <tr key={s.id} data-index={s.index}>
              {i === 0 && (
                <th scope="rowgroup" rowSpan={g.rollouts.length} className="sample-table-prompt">
                  <pre>{g.prompt}</pre>
                </th>
              )}
              <td className="num">{i + 1}</td>
              <td>
                <pre>{s.response || <span className="muted">(empty)</span>}</pre>
              </td>
              <td className="num">{shown(s.reward)}</td>
              {components.map((name) => (
                <td className="num" key={name}>
                  {shown(s.scores[name])}
                </td>
              ))}
              <td className="num">{shown(s.scores.advantage)}</td>
              <td className="num">{lengthOf(s)}</td>
            </tr>
          ))}
        </tbody>
      ))}
    </table>
  );
}

function lengthOf(s: Sample): string {
  const length = shown(s.scores.length);
  return s.scores.truncated === 1 ? `${length} (truncated)` : length;
}
