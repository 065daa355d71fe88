import { LineCounter, parseDocument, stringify, isMap, isScalar, isSeq, type Node } from 'yaml';
import dpo from '../../../../examples/dpo.yaml?raw';
import grpo from '../../../../examples/grpo.yaml?raw';
import ilql from '../../../../examples/ilql.yaml?raw';
import ppo from '../../../../examples/ppo.yaml?raw';
import reward from '../../../../examples/reward.yaml?raw';
import sft from '../../../../examples/sft.yaml?raw';
import type { Algorithm } from '../../api/types';

/** One template per algorithm: the repository's examples, so the two never drift. */
export const TEMPLATES: Record<Algorithm, string> = { sft, reward, dpo, ppo, grpo, ilql };

export function isAlgorithm(value: string | null): value is Algorithm {
  return value != null && value in TEMPLATES;
}

/**
 * The text with `model.path` set, e.g. to start from a checkpoint. An existing value is replaced
 * in place so comments, alignment and flow style stay byte for byte; otherwise the Document API
 * adds the field (comments kept, layout normalised).
 */
export function withModelPath(text: string, model: string): string {
  const doc = parseDocument(text);
  const current = doc.getIn(['model', 'path'], true);
  if (doc.errors.length === 0 && isScalar(current) && current.range) {
    const [start, end] = current.range;
    return text.slice(0, start) + stringify(model).trimEnd() + text.slice(end);
  }
  doc.setIn(['model', 'path'], model);
  return doc.toString({ lineWidth: 0, flowCollectionPadding: false });
}

/** A run's stored spec as YAML to edit, renamed so the copy is told apart. */
export function cloneText(spec: Record<string, unknown>): string {
  const name = typeof spec.name === 'string' ? `${spec.name}-clone` : 'clone';
  return stringify({ ...spec, name }, { lineWidth: 0 });
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
