// The order an evaluation reads in (the eval algorithm's report, docs/spec.md): how often right, then the
// reward behind it, then how long the answers were and how many hit the length limit; anything else last.
const RANKS: Array<(name: string) => boolean> = [
  (n) => n === 'accuracy',
  (n) => /^pass@\d+$/.test(n),
  (n) => n === 'reward',
  (n) => n.startsWith('reward/'),
  (n) => n === 'length',
  (n) => n === 'truncated',
];

function rankOf(key: string): [number, number, string] {
  const name = key.replace(/^eval\//, '');
  const rank = RANKS.findIndex((matches) => matches(name));
  // pass@k by k: pass@16 after pass@4.
  const k = Number(/^pass@(\d+)$/.exec(name)?.[1] ?? 0);
  return [rank < 0 ? RANKS.length : rank, k, name];
}

/** eval/* keys in reading order: accuracy, pass@k by k, reward, its components, length, truncated, the rest by name. */
export function sortEvalKeys(keys: Iterable<string>): string[] {
  return [...new Set(keys)].sort((a, b) => {
    const [ra, ka, na] = rankOf(a);
    const [rb, kb, nb] = rankOf(b);
    return ra - rb || ka - kb || (na < nb ? -1 : na > nb ? 1 : 0);
  });
}
