export type DiffOp = 'same' | 'del' | 'ins';

export interface DiffPart {
  op: DiffOp;
  text: string;
}

export interface WordDiff {
  parts: DiffPart[];
  /** Words (and punctuation marks) only in the first text, and only in the second. */
  removed: number;
  added: number;
  /** False when the texts were too long to align word by word: the middle shows as all removed, all added. */
  exact: boolean;
}

// A word or a single punctuation mark with the whitespace after it; leading whitespace on its own.
// Words are compared without their whitespace, so a reflowed line does not read as a rewrite.
const TOKEN = /\s+|(?:[\p{L}\p{N}_]+|[^\s\p{L}\p{N}_])\s*/gu;

export function tokenize(text: string): string[] {
  return text.match(TOKEN) ?? [];
}

// The LCS table is (n+1)·(m+1) 16-bit cells: 32 MB at this bound, where two ~4,000-word answers differ throughout.
const MAX_CELLS = 16_000_000;

/** A word-level diff from `a` to `b` by longest common subsequence; unchanged words are shown as `b` spells them. */
export function wordDiff(a: string, b: string): WordDiff {
  const x = tokenize(a);
  const y = tokenize(b);
  const key = (t: string) => t.trimEnd();
  let pre = 0;
  while (pre < x.length && pre < y.length && key(x[pre]!) === key(y[pre]!)) pre++;
  let suf = 0;
  while (suf < x.length - pre && suf < y.length - pre && key(x[x.length - 1 - suf]!) === key(y[y.length - 1 - suf]!)) suf++;

  const out: WordDiff = { parts: [], removed: 0, added: 0, exact: true };
  const push = (op: DiffOp, text: string) => {
    if (!text) return;
    if (op === 'del' && text.trim()) out.removed++;
    if (op === 'ins' && text.trim()) out.added++;
    const last = out.parts.at(-1);
    if (last?.op === op) last.text += text;
    else out.parts.push({ op, text });
  };

  y.slice(0, pre).forEach((t) => push('same', t));
  const xs = x.slice(pre, x.length - suf).map(key);
  const ys = y.slice(pre, y.length - suf);
  const yk = ys.map(key);
  const xt = x.slice(pre, x.length - suf);
  const n = xs.length;
  const m = ys.length;
  if ((n + 1) * (m + 1) > MAX_CELLS) {
    out.exact = false;
    xt.forEach((t) => push('del', t));
    ys.forEach((t) => push('ins', t));
  } else {
    // lcs[i*w + j]: length of the LCS of xs[i..] and yk[j..].
    const w = m + 1;
    const lcs = new Uint16Array((n + 1) * w);
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * w + j] = xs[i] === yk[j] ? lcs[(i + 1) * w + j + 1]! + 1 : Math.max(lcs[(i + 1) * w + j]!, lcs[i * w + j + 1]!);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (xs[i] === yk[j]) {
        push('same', ys[j]!);
        i++;
        j++;
      } else if (lcs[(i + 1) * w + j]! >= lcs[i * w + j + 1]!) push('del', xt[i++]!);
      else push('ins', ys[j++]!);
    }
    while (i < n) push('del', xt[i++]!);
    while (j < m) push('ins', ys[j++]!);
  }
  y.slice(y.length - suf).forEach((t) => push('same', t));
  return out;
}
