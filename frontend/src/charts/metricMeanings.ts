/**
 * What the RL health signals mean, keyed by metric key: the tooltip on a chart's title (MetricTitle), on the
 * run page and in Compare, and for any other view that names a key. A key not here gets no tooltip.
 * The trainers' definitions are in docs/rl.md and trainer_core/losses/policy.py.
 */
export const METRIC_MEANINGS: Readonly<Record<string, string>> = {
  'reward/mean': "Mean reward of the step's answers.",
  'reward/std': "Standard deviation of the step's rewards.",

  'rollout/logprob_diff':
    "Mean |trainer - engine| log-probability of the sampled tokens: how far the rollout engine's numbers are from the trainer's (float noise on one device in fp32).",
  'rollout/logprob_diff_max': 'Largest |trainer - engine| log-probability of a sampled token in the step.',
  'rollout/kl':
    "KL(engine || trainer) per token (k3 estimate): the off-policy gap between the engine that sampled and the policy being trained; grpo.tis_cap corrects for it.",

  'spin/iteration': 'The self-play iteration this step belongs to (1, 2, ...): each begins with the model answering its prompts.',
  'spin/answers_equal':
    "Share of the iteration's prompts where the model's own answer already equals the data's (SPIN's stopping signal): near 1, the pairs teach nothing more.",

  'data/rows': 'Rows the generate run wrote to its dataset (final/data.jsonl), which later runs read as data.source run:<id>.',
  'data/revised': "Share of critique_revise rows whose last revision differs from the model's first answer.",
  'data/agreement':
    'ai_feedback: share of pairs where the feedback model chose the same answer in both orders; near 0 means its choice follows the position, not the answers.',
  'data/preference': "ai_feedback: mean probability the feedback model gave the chosen answer (0.5: no preference).",
  'data/identical': 'ai_feedback: prompts whose two answers were the same, dropped (they teach a reward model nothing).',

  'grpo/zero_std_groups':
    'Share of answers in groups whose rewards were all equal: they teach nothing. High means the task is too easy or too hard for the policy.',
  'grpo/clipfrac': 'Share of answer tokens whose probability ratio was clipped (either side).',
  'grpo/clipfrac_low':
    'Ratio under 1 - cliprange with a negative advantage (the policy was kept from lowering a bad token further).',
  'grpo/clipfrac_high':
    "Ratio over 1 + clip_high with a positive advantage (the policy was kept from raising a good token further); DAPO's clip-higher raises this limit.",
  'grpo/ratio_mean': 'Mean importance ratio (new policy / sampling policy) over answer tokens; 1 when each batch is used once.',
  'grpo/ratio_min': "Smallest importance ratio (new policy / sampling policy) over the step's answer tokens.",
  'grpo/ratio_max': "Largest importance ratio (new policy / sampling policy) over the step's answer tokens.",
  'grpo/approx_kl': 'Approximate KL between the updated and the sampling policy.',
  'grpo/entropy':
    'Mean entropy of the next-token distribution over answer tokens; a collapse toward 0 means the policy stopped exploring.',
  'grpo/kl': 'KL to the reference model (k3 or k1 estimator), the term in the loss.',
  'grpo/reward_kl': "Each answer's summed log-ratio to the reference, taken off its reward (grpo.kl_in: reward).",
  'grpo/overlong_penalty': "Mean reward taken off answers for their length (DAPO's overlong shaping).",

  'gen/truncated': 'Share of answers that ran to max_new_tokens (cut off).',
  'gen/prompt_cut':
    "Share of answers whose prompt (with an environment's opening) lost its start to fit model.max_seq_len less the answer's room; above 0, the policy saw less than the samples show.",
  'gen/response_length': 'Mean answer length in tokens.',
  'gen/response_length_min': "Shortest answer of the step, in tokens.",
  'gen/response_length_max': "Longest answer of the step, in tokens.",

  'env/turns': "The policy's turns per episode (grpo.environment, ppo.environment).",
  'env/tool_calls': 'Answers of the environment that ran a tool, per episode.',
  'env/errors':
    'Turns the environment could not use (a malformed tool call, code that did not run), per episode; the run logs their reasons.',
  'env/truncated': "Share of episodes cut off by the environment section's max_turns or max_tokens before the environment ended them.",

  'async/staleness_mean':
    "Mean, over the step's groups, of how many optimizer steps older than the trained policy the policy that sampled them was; 0 is on-policy.",
  'async/staleness_max': "Largest staleness of a group in the step, in optimizer steps; never above grpo.max_staleness.",
  'async/queue_depth':
    'Batches the generator had finished and queued, waiting, when the trainer took its batch; high means generation runs ahead of training.',
  'async/dropped_groups':
    'Groups dropped so far in the run for being older than grpo.max_staleness when their turn to be trained came; their prompts were never trained on.',
  'async/generator_idle':
    "Share of the step's wall time the generator waited (for fresher weights or room in the queue) instead of generating; most of the time means the trainer is the bottleneck, and a larger grpo.max_staleness only makes samples staler.",
  'async/trainer_idle':
    "Share of the step's wall time the trainer waited for the generator's next batch; most of the time means generation is the bottleneck (a faster gen.engine, grpo.generator: process, or a larger grpo.max_staleness).",
  'perf/weight_sync_s': "Seconds the step spent bringing the rollout engine's weights to the policy's version.",
  'perf/attempt_tokens':
    "Input tokens this attempt's trainer has trained on so far; a resumed attempt counts from 0. Its last value is the attempt's tokens on the Usage page.",

  'ppo/explained_variance':
    "How much of the returns' variance the value head explains: 1 is perfect, 0 or below means the critic predicts nothing.",
  'ppo/clipfrac': 'Share of answer tokens whose probability ratio was clipped (either side).',
  'ppo/clipfrac_low':
    'Ratio under 1 - cliprange with a negative advantage (the policy was kept from lowering a bad token further).',
  'ppo/clipfrac_high':
    'Ratio over 1 + cliprange with a positive advantage (the policy was kept from raising a good token further).',
  'ppo/ratio_mean': 'Mean importance ratio (new policy / sampling policy) over answer tokens, over all epochs.',
  'ppo/ratio_min': "Smallest importance ratio (new policy / sampling policy) over the step's answer tokens.",
  'ppo/ratio_max': "Largest importance ratio (new policy / sampling policy) over the step's answer tokens.",
  'ppo/value_clipfrac': "Share of answer tokens whose value was clipped to within cliprange_value of the rollout's value.",
  'ppo/approx_kl': 'Approximate KL between the updated and the sampling policy.',
  'ppo/entropy':
    'Mean entropy of the next-token distribution over answer tokens; a collapse toward 0 means the policy stopped exploring.',
  'ppo/kl': "KL to the reference model: each answer's summed per-token log-ratio (k1), taken off its reward times ppo/kl_coef.",
  'ppo/kl_coef': 'The KL coefficient; the adaptive controller moves it toward ppo.target_kl.',
};

/** The meaning of a metric key, or undefined for a key the table does not explain. */
export function metricMeaning(key: string): string | undefined {
  return Object.hasOwn(METRIC_MEANINGS, key) ? METRIC_MEANINGS[key] : undefined;
}
