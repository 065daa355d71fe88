import { ONLINE_SECTIONS } from '../../api/algorithms';
import type { RunDetail } from '../../api/types';
import { TEMPLATES, withModelPath, withValue } from './spec';

/** The run whose checkpoint is evaluated: its spec as stored (every default filled in). */
export type EvalSource = Pick<RunDetail, 'name' | 'project' | 'spec'>;

export interface EvalDraft {
  text: string;
  /** What the author must still do before submitting: the source run had no reward to reuse. */
  note: string | null;
}

// ONLINE_SECTIONS: an RL run's sections whose response length and stop strings its evaluation keeps, as `rlplane
// eval` does: a shorter answer than the run was trained to give would be scored as a wrong one.

/**
 * The eval template (examples/eval.yaml, comments kept) judging `model`; given the run it comes from, judged
 * on that run's data with its reward, context length, response length and resources, in its project, as
 * `rlplane eval` builds it. A run that played episodes (grpo or ppo .environment) is judged on episodes of its
 * environment, with its reward if it had one beside it. A run without either (SFT) keeps the template's reward,
 * and the note says so.
 */
export function evalText(model: string, source?: EvalSource): EvalDraft {
  let text = withModelPath(TEMPLATES.eval, model);
  if (!source) return { text, note: null };
  const set = (path: string[], value: unknown) => {
    if (value != null) text = withValue(text, path, value);
  };
  const spec = source.spec;
  set(['name'], `eval-${source.name}`.slice(0, 128));
  set(['project'], source.project);
  set(['description'], `evaluation of ${model} (${source.name})`);
  set(['tags'], ['eval']);
  set(['model', 'max_seq_len'], spec.model?.max_seq_len);
  set(['data'], spec.data);
  set(['reward'], spec.reward);
  set(['resources'], spec.resources);
  const online = ONLINE_SECTIONS.map((name) => spec[name]).find((section) => section != null);
  set(['eval', 'gen', 'max_new_tokens'], online?.gen?.max_new_tokens);
  const stop = online?.gen?.stop;
  if (stop?.length) set(['eval', 'gen', 'stop'], stop);
  const environment = online?.environment;
  if (environment != null) {
    set(['eval', 'environment'], environment);
    if (spec.reward == null) text = withValue(text, ['reward'], null); // the environment judges
    return { text, note: null };
  }
  const note = spec.reward == null ? `Run ${source.name} has no reward to reuse: choose one (the reward below is the template's).` : null;
  return { text, note };
}
