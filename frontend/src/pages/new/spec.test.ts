import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import commandExample from '../../../../examples/command.yaml?raw';
import dpoExample from '../../../../examples/dpo.yaml?raw';
import grpoExample from '../../../../examples/grpo.yaml?raw';
import ppoExample from '../../../../examples/ppo.yaml?raw';
import { cloneText, fieldErrors, lineOf, placeholderFor, TEMPLATES, withModelPath } from './spec';

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
  });

  it('clones the spec as submitted: comments kept, renamed in place; JSON as YAML; the stored spec for old runs', () => {
    const text = '# why this run\nname: a   # the name\ntrain: {lr: 1}\n';
    expect(cloneText({ spec: { name: 'a', dpo: null }, spec_text: text }, 'a-clone')).toBe(
      '# why this run\nname: a-clone   # the name\ntrain: {lr: 1}\n',
    );
    const fromJson = cloneText({ spec: {}, spec_text: '{"name": "a", "train": {"lr": 1}}' }, 'a-clone');
    expect(fromJson).toBe('name: a-clone\ntrain:\n  lr: 1\n');
    expect(parse(cloneText({ spec: { name: 'a', train: { lr: 1 } }, spec_text: null }, 'a-clone'))).toEqual({
      name: 'a-clone',
      train: { lr: 1 },
    });
  });

  it("turns an example's local model path into a run placeholder the server names, keeping its comment", () => {
    expect(placeholderFor('./runs/sft-arithmetic/checkpoints/step-000250')).toBe('run:<id of your sft-arithmetic run>@250');
    expect(placeholderFor('./runs/sft-randomwalks/final')).toBe('run:<id of your sft-randomwalks run>');
    expect(placeholderFor('~/models/x')).toBe('run:<id of your SFT run>');
    expect(TEMPLATES.grpo).toBe(
      grpoExample.replace('path: ./runs/sft-arithmetic/checkpoints/step-000250', 'path: run:<id of your sft-arithmetic run>@250'),
    );
    expect(TEMPLATES.grpo).toContain('# from `rlplane train examples/sft-arithmetic.yaml`; or run:<id>@250');
    expect(parse(TEMPLATES.ppo).model.path).toBe('run:<id of your sft-randomwalks run>');
    expect(parse(TEMPLATES.spin).model.path).toBe('run:<id of your sft-arithmetic run>@250'); // SPIN starts from SFT too
    expect(TEMPLATES.ppo).not.toBe(ppoExample);
    expect(TEMPLATES.dpo).toBe(dpoExample); // a builtin model stays as it is
    // command's script picks its own model: its template has none
    for (const text of Object.values(TEMPLATES)) expect(parse(text).model?.path ?? '').not.toMatch(/^(\.|~)/);
  });

  it('has a template per algorithm, each naming its algorithm', () => {
    for (const [algorithm, text] of Object.entries(TEMPLATES)) expect(parse(text).algorithm).toBe(algorithm);
    expect(Object.keys(TEMPLATES)).toContain('command');
  });

  it("offers the command template as examples/command.yaml is: a script on a shared directory, comments kept", () => {
    expect(TEMPLATES.command).toBe(commandExample);
    const spec = parse(TEMPLATES.command);
    expect(spec.model).toBeUndefined();
    expect(spec.command.code).toEqual({ path: '/shared/code/my-project' });
    expect(spec.command.argv).toEqual(expect.arrayContaining(['{train.lr}', '{train.steps}']));
    expect(TEMPLATES.command).toContain('--code DIR');
    expect(TEMPLATES.command).toContain('rlplane.init()');
  });

  it('clones a run its script started itself without command.external, which only the API sets', () => {
    const spec = { name: 'mine', algorithm: 'command', command: { argv: ['train.py'], external: true, code: null } };
    const cloned = parse(cloneText({ spec, spec_text: null }, 'mine-clone'));
    expect(cloned.name).toBe('mine-clone');
    expect(cloned.command).toEqual({ argv: ['train.py'], code: null });
    const written = '# mine\nname: a\nalgorithm: command\ncommand: {argv: [python, t.py]}  # keep\n';
    expect(cloneText({ spec: {}, spec_text: written }, 'b')).toBe(written.replace('name: a', 'name: b'));
  });
});
