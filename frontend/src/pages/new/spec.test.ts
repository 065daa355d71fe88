import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { cloneText, fieldErrors, lineOf, TEMPLATES, withModelPath } from './spec';

const TEXT = `# a comment
name: x
model:
  path: builtin:tiny-gpt2
train:
  lr: -1
data:
  files:
    - a.jsonl
    - b.jsonl
`;

describe('spec helpers', () => {
  it('finds the line of nested keys, list items, and the nearest parent of a missing key', () => {
    expect(lineOf(TEXT, ['name'])).toBe(2);
    expect(lineOf(TEXT, ['train', 'lr'])).toBe(6);
    expect(lineOf(TEXT, ['data', 'files', 1])).toBe(10);
    expect(lineOf(TEXT, ['train', 'steps'])).toBe(5);
    expect(lineOf(TEXT, ['algorithm'])).toBe(1);
    expect(lineOf('name: [', ['name'])).toBe(1);
  });

  it('turns the API 422 detail into placed errors, YAML syntax errors at their own line', () => {
    const errors = fieldErrors(TEXT, [
      { loc: ['body', 'train', 'lr'], msg: 'Input should be greater than 0' },
      { loc: ['body'], msg: 'invalid YAML at line 4, column 2: bad' },
    ]);
    expect(errors.map((e) => [e.field, e.line])).toEqual([['train.lr', 6], ['', 4]]);
    expect(fieldErrors(TEXT, 'no write access')[0]?.message).toBe('no write access');
  });

  it('sets model.path keeping comments, and clones with a new name', () => {
    const out = withModelPath(TEMPLATES.sft, 'run:3@40');
    expect(parse(out).model.path).toBe('run:3@40');
    expect(out).toContain('# Supervised fine-tuning');
    // Only that one value changes: comments, alignment and flow style stay as written.
    expect(out).toBe(TEMPLATES.sft.replace('path: builtin:tiny-gpt2', 'path: run:3@40'));
    expect(parse(withModelPath('model: {path: a}  # keep\n', "it's: odd")).model.path).toBe("it's: odd");
    const added = withModelPath('# top\nname: x\ntags: [a]\n', 'run:1');
    expect(parse(added)).toEqual({ name: 'x', tags: ['a'], model: { path: 'run:1' } });
    expect(added).toContain('# top');
    expect(parse(cloneText({ name: 'a', train: { lr: 1 } }))).toEqual({ name: 'a-clone', train: { lr: 1 } });
  });

  it('has a template per algorithm, each naming its algorithm', () => {
    for (const [algorithm, text] of Object.entries(TEMPLATES)) expect(parse(text).algorithm).toBe(algorithm);
  });
});
