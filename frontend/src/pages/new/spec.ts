import { LineCounter, parseDocument, stringify, isCollection, isMap, isScalar, isSeq, type Node } from 'yaml';
import command from '../../../../examples/command.yaml?raw';
import dpo from '../../../../examples/dpo.yaml?raw';
import evaluation from '../../../../examples/eval.yaml?raw';
import generate from '../../../../examples/generate.yaml?raw';
import grpo from '../../../../examples/grpo.yaml?raw';
import ilql from '../../../../examples/ilql.yaml?raw';
import ppo from '../../../../examples/ppo.yaml?raw';
import reward from '../../../../examples/reward.yaml?raw';
import sft from '../../../../examples/sft.yaml?raw';
import spin from '../../../../examples/spin.yaml?raw';
import type { Algorithm } from '../../api/types';
import { specSource } from '../../lib/specText';

/**
 * The text with the value at `path` set. An existing scalar set to a scalar is replaced in place so
 * comments, alignment and flow style stay byte for byte; otherwise the Document API sets the field
 * (comments kept, layout normalised), a section written in flow style (`reward: {kind: builtin}`) staying so.
 */
export function withValue(text: string, path: string[], value: unknown): string {
  const doc = parseDocument(text);
  const current = doc.getIn(path, true);
  const scalar = value === null || typeof value !== 'object';
  if (doc.errors.length === 0 && scalar && isScalar(current) && current.range) {
    const [start, end] = current.range;
    return text.slice(0, start) + stringify(value).trimEnd() + text.slice(end);
  }
  doc.setIn(path, doc.createNode(value, { flow: isCollection(current) && !!current.flow }));
  return doc.toString({ lineWidth: 0, flowCollectionPadding: false });
}

/** The text with `model.path` set, e.g. to start from a checkpoint. */
export function withModelPath(text: string, model: string): string {
  return withValue(text, ['model', 'path'], model);
}

// A path on the submitter's machine (what `rlplane train` wrote); the server refuses it at submit.
const LOCAL_PATH = /^(\.{1,2}\/|~)/;

/**
 * What an example's local model path becomes in a template: a run reference with a hole the server
 * names ("is a template's placeholder"), e.g. ./runs/sft-arithmetic/checkpoints/step-000250 ->
 * run:<id of your sft-arithmetic run>@250.
 */
export function placeholderFor(localPath: string): string {
  const run = /(?:^|\/)runs\/([^/]+)/.exec(localPath)?.[1] ?? 'SFT';
  const step = /step-0*(\d+)/.exec(localPath)?.[1];
  return `run:<id of your ${run} run>${step ? `@${step}` : ''}`;
}

/** An example as a template: its local model path (if any) replaced by a placeholder, comments kept. */
export function asTemplate(example: string): string {
  const path: unknown = parseDocument(example).getIn(['model', 'path']);
  return typeof path === 'string' && LOCAL_PATH.test(path) ? withModelPath(example, placeholderFor(path)) : example;
}

/** One template per algorithm: the repository's examples, so the two never drift. */
export const TEMPLATES: Record<Algorithm, string> = {
  sft: asTemplate(sft),
  reward: asTemplate(reward),
  dpo: asTemplate(dpo),
  spin: asTemplate(spin),
  ppo: asTemplate(ppo),
  grpo: asTemplate(grpo),
  ilql: asTemplate(ilql),
  eval: asTemplate(evaluation),
  generate: asTemplate(generate),
  command: asTemplate(command),
};

// The repository's example pipelines (examples/pipelines/*.yaml), as they are: SteerLM's, the RLHF chains.
const pipelineFiles = import.meta.glob('../../../../examples/pipelines/*.yaml', { query: '?raw', import: 'default', eager: true });

/** One template per example pipeline, by its file's name (steerlm, sft-rm-ppo, ...), comments kept. */
export const PIPELINE_TEMPLATES: Readonly<Record<string, string>> = Object.fromEntries(
  Object.entries(pipelineFiles)
    .map(([path, text]) => [path.slice(path.lastIndexOf('/') + 1).replace(/\.yaml$/, ''), String(text)] as const)
    .sort(([a], [b]) => a.localeCompare(b)),
);

/** A pipeline (docs/pipelines.md) rather than a run spec: a document with top-level `stages`. */
export function isPipelineText(text: string): boolean {
  return /^stages\s*:/m.test(text) || /^\s*\{[\s\S]*"stages"\s*:/.test(text);
}

export function isAlgorithm(value: string | null): value is Algorithm {
  return value != null && value in TEMPLATES;
}

/**
 * A run's spec to edit as a new run named `name`: as its author wrote it (lib/specText.ts), renamed in place.
 * A run its script started itself has `command.external` set, which only the API may set (a submit is refused
 * with it): the clone leaves it out, to run the command on a worker.
 */
export function cloneText(run: { spec: Record<string, unknown>; spec_text: string | null }, name: string): string {
  const text = withValue(specSource(run).text, ['name'], name);
  const doc = parseDocument(text);
  if (!doc.hasIn(['command', 'external'])) return text;
  doc.deleteIn(['command', 'external']);
  return doc.toString({ lineWidth: 0, flowCollectionPadding: false });
}

export type Path = Array<string | number>;

/**
 * The 1-based line of a field in the YAML text; a missing field (a required one not written yet)
 * points at its nearest written parent, and the document itself at line 1.
 */
export function lineOf(text: string, path: Path): number {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, keepSourceTokens: true });
  let node: unknown = doc.contents;
  let line = 1;
  for (const part of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => String((p.key as Node | null)?.toJSON?.() ?? p.key) === String(part));
      if (!pair) break;
      const key = pair.key as Node | null;
      if (key?.range) line = counter.linePos(key.range[0]).line;
      node = pair.value;
    } else if (isSeq(node) && typeof part === 'number' && node.items[part]) {
      const item = node.items[part] as Node;
      if (item.range) line = counter.linePos(item.range[0]).line;
      node = item;
    } else {
      break;
    }
  }
  return line;
}

export interface FieldError {
  path: Path;
  field: string;
  message: string;
  /** Where in the text; null for an answer about the request as a whole (403: no write access). */
  line: number | null;
}

/** The API's answer to a bad spec (422 detail list, or a message) as errors placed in the text. */
export function fieldErrors(text: string, detail: unknown): FieldError[] {
  if (!Array.isArray(detail)) {
    return [{ path: [], field: '', message: typeof detail === 'string' ? detail : JSON.stringify(detail), line: null }];
  }
  return detail.map((err: { loc?: Path; msg?: string }) => {
    const path = (err.loc ?? []).filter((p, i) => !(i === 0 && p === 'body'));
    const message = err.msg ?? 'invalid';
    // A YAML syntax error names its own line.
    const yamlLine = /at line (\d+)/.exec(message);
    const line = yamlLine ? Number(yamlLine[1]) : lineOf(text, path);
    return { path, field: path.join('.'), message, line };
  });
}
