import { describe, expect, it } from 'vitest';
import { tokenize, wordDiff } from './wordDiff';

const show = (a: string, b: string) =>
  wordDiff(a, b)
    .parts.map((p) => (p.op === 'same' ? p.text : p.op === 'del' ? `[-${p.text}-]` : `{+${p.text}+}`))
    .join('');

describe('tokenize', () => {
  it('splits words and punctuation, each with the whitespace after it', () => {
    expect(tokenize('  x = 42.\nDone')).toEqual(['  ', 'x ', '= ', '42', '.\n', 'Done']);
    expect(tokenize('')).toEqual([]);
  });
});

describe('wordDiff', () => {
  it('finds nothing between equal texts', () => {
    expect(wordDiff('the cat sat', 'the cat sat')).toEqual({ parts: [{ op: 'same', text: 'the cat sat' }], removed: 0, added: 0, exact: true });
  });

  it('marks a replaced word as removed then added', () => {
    expect(show('the cat sat on the mat', 'the dog sat on the mat')).toBe('the [-cat -]{+dog +}sat on the mat');
    const d = wordDiff('the cat sat on the mat', 'the dog sat on the mat');
    expect([d.removed, d.added]).toEqual([1, 1]);
  });

  it('keeps the common words in order between insertions and deletions', () => {
    expect(show('a b c d', 'a x c d e')).toBe('a [-b -]{+x +}c d {+e+}');
    expect(show('The answer is 4.', 'So the answer is 5.')).toBe('[-The -]{+So the +}answer is [-4-]{+5+}.');
    expect(show('one two three', 'three')).toBe('[-one two -]three');
  });

  it('reads from or to an empty text as all added or all removed', () => {
    expect(wordDiff('', 'new words')).toMatchObject({ parts: [{ op: 'ins', text: 'new words' }], added: 2, removed: 0 });
    expect(wordDiff('old', '')).toMatchObject({ parts: [{ op: 'del', text: 'old' }], added: 0, removed: 1 });
  });

  it('compares words, not the whitespace between them, and keeps the new text\'s line breaks', () => {
    expect(show('step one\nstep two', 'step one step two')).toBe('step one step two');
    expect(show('a\nb', 'a\nc')).toBe('a\n[-b-]{+c+}');
  });

  it('falls back to removed-then-added for texts too long to align, keeping the common ends', () => {
    const a = Array.from({ length: 5000 }, (_, i) => `a${i}`).join(' ');
    const b = Array.from({ length: 5000 }, (_, i) => `b${i}`).join(' ');
    const d = wordDiff(`start ${a} end`, `start ${b} end`);
    expect(d.exact).toBe(false);
    expect(d.parts.map((p) => p.op)).toEqual(['same', 'del', 'ins', 'same']);
    expect([d.removed, d.added]).toEqual([5000, 5000]);
  });
});
