import { describe, expect, it } from 'vitest';
import { METRIC_MEANINGS, metricMeaning } from './metricMeanings';

describe('metricMeaning', () => {
  it('explains every RL health signal GRPO and PPO report', () => {
    const keys = [
      'grpo/zero_std_groups', 'grpo/clipfrac', 'grpo/clipfrac_low', 'grpo/clipfrac_high', 'grpo/ratio_mean', 'grpo/ratio_min',
      'grpo/ratio_max', 'grpo/approx_kl', 'grpo/entropy', 'grpo/kl', 'grpo/reward_kl', 'grpo/overlong_penalty', 'gen/truncated', 'gen/prompt_cut',
      'gen/response_length', 'gen/response_length_min', 'gen/response_length_max', 'ppo/explained_variance', 'ppo/clipfrac',
      'ppo/value_clipfrac', 'ppo/approx_kl', 'ppo/entropy', 'ppo/kl', 'ppo/kl_coef', 'env/turns', 'env/tool_calls', 'env/errors',
      'env/truncated',
    ];
    expect(keys.filter((k) => !metricMeaning(k))).toEqual([]);
    expect(metricMeaning('grpo/clipfrac_low')).toBe(
      'Ratio under 1 - cliprange with a negative advantage (the policy was kept from lowering a bad token further).');
  });

  it("explains an asynchronous GRPO run's pipeline, and which side is the bottleneck when one idles", () => {
    const keys = [
      'async/staleness_mean', 'async/staleness_max', 'async/queue_depth', 'async/dropped_groups', 'async/generator_idle',
      'async/trainer_idle', 'perf/weight_sync_s',
    ];
    expect(keys.filter((k) => !metricMeaning(k))).toEqual([]);
    expect(metricMeaning('async/generator_idle')).toContain('the trainer is the bottleneck');
    expect(metricMeaning('async/trainer_idle')).toContain('generation is the bottleneck');
  });

  it('has nothing for a key it does not know, an object property name included', () => {
    expect(metricMeaning('custom/thing')).toBeUndefined();
    expect(metricMeaning('constructor')).toBeUndefined();
    expect(Object.values(METRIC_MEANINGS).every((m) => m.endsWith('.'))).toBe(true);
  });
});
