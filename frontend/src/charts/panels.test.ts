import { describe, expect, it } from 'vitest';
import { groupPanels, searchKeys } from './panels';

describe('groupPanels', () => {
  it('groups RLHF keys into known panels in reading order, the rest last', () => {
    const keys = [
      'perf/step_s', 'train/lr', 'custom/thing', 'train/loss', 'eval/loss', 'ppo/kl', 'ppo/kl_coef',
      'reward/mean', 'rewards/margin', 'eval/accuracy', 'eval/margin', 'train/grad_norm', 'ppo/value_loss',
    ];
    expect(groupPanels(keys)).toEqual([
      { title: 'Reward', keys: ['reward/mean', 'rewards/margin'] },
      { title: 'KL', keys: ['ppo/kl', 'ppo/kl_coef'] },
      { title: 'Losses', keys: ['eval/loss', 'train/loss', 'ppo/value_loss'] },
      { title: 'Eval accuracy & margins', keys: ['eval/accuracy', 'eval/margin'] },
      { title: 'Learning rate', keys: ['train/lr'] },
      { title: 'Gradient norm', keys: ['train/grad_norm'] },
      { title: 'Performance', keys: ['perf/step_s'] },
      { title: 'Other', keys: ['custom/thing'] },
    ]);
  });

  it("groups a GRPO run's RL health signals: KL, clipping & ratio, entropy & length, groups", () => {
    const keys = [
      'reward/mean', 'reward/std', 'train/loss', 'grpo/policy_loss', 'grpo/kl', 'grpo/reward_kl', 'grpo/approx_kl',
      'grpo/clipfrac', 'grpo/clipfrac_low', 'grpo/clipfrac_high', 'grpo/ratio_mean', 'grpo/ratio_min', 'grpo/ratio_max',
      'grpo/entropy', 'grpo/overlong_penalty', 'gen/truncated', 'gen/response_length', 'gen/response_length_min',
      'gen/response_length_max', 'grpo/zero_std_groups', 'grpo/advantage_std',
    ];
    expect(groupPanels(keys)).toEqual([
      { title: 'Reward', keys: ['reward/mean', 'reward/std'] },
      { title: 'KL', keys: ['grpo/kl', 'grpo/reward_kl'] },
      { title: 'Losses', keys: ['train/loss', 'grpo/policy_loss'] },
      {
        title: 'Clipping & ratio',
        keys: ['grpo/approx_kl', 'grpo/clipfrac', 'grpo/clipfrac_high', 'grpo/clipfrac_low', 'grpo/ratio_max', 'grpo/ratio_mean', 'grpo/ratio_min'],
      },
      {
        title: 'Entropy & length',
        keys: ['gen/response_length', 'gen/response_length_max', 'gen/response_length_min', 'gen/truncated', 'grpo/entropy', 'grpo/overlong_penalty'],
      },
      { title: 'Groups', keys: ['grpo/zero_std_groups'] },
      { title: 'RL diagnostics', keys: ['grpo/advantage_std'] }, // a GRPO key without a panel of its own, not Other
    ]);
  });

  it("groups a PPO run's: the critic beside them, TRL's rloo/* keys with ours", () => {
    const keys = ['ppo/clipfrac', 'ppo/approx_kl', 'ppo/entropy', 'ppo/value_clipfrac', 'ppo/kl', 'ppo/kl_coef', 'ppo/policy_loss',
      'ppo/explained_variance', 'train/skipped_steps', 'values/mean', 'gen/response_length', 'rloo/kl', 'rloo/clipfrac'];
    expect(groupPanels(keys)).toEqual([
      { title: 'KL', keys: ['ppo/kl', 'rloo/kl', 'ppo/kl_coef'] },
      { title: 'Losses', keys: ['ppo/policy_loss'] },
      { title: 'Clipping & ratio', keys: ['ppo/approx_kl', 'ppo/clipfrac', 'ppo/value_clipfrac', 'rloo/clipfrac'] },
      { title: 'Entropy & length', keys: ['gen/response_length', 'ppo/entropy'] },
      { title: 'Critic', keys: ['values/mean', 'ppo/explained_variance'] },
      { title: 'Gradient norm', keys: ['train/skipped_steps'] },
    ]);
  });

  it("gives the rollout engine's mismatch its own panel, before KL takes rollout/kl", () => {
    expect(groupPanels(['rollout/kl', 'rollout/logprob_diff', 'grpo/kl'])).toEqual([
      { title: 'Rollout engine', keys: ['rollout/kl', 'rollout/logprob_diff'] },
      { title: 'KL', keys: ['grpo/kl'] },
    ]);
  });

  it("gives an asynchronous run's pipeline its own panel before Performance, which keeps perf/weight_sync_s", () => {
    const keys = [
      'perf/weight_sync_s', 'async/trainer_idle', 'async/generator_idle', 'async/queue_depth', 'async/dropped_groups',
      'async/staleness_max', 'async/staleness_mean', 'perf/step_s', 'grpo/zero_std_groups',
    ];
    expect(groupPanels(keys)).toEqual([
      { title: 'Groups', keys: ['grpo/zero_std_groups'] },
      {
        title: 'Async RL',
        keys: ['async/dropped_groups', 'async/generator_idle', 'async/queue_depth', 'async/staleness_max', 'async/staleness_mean', 'async/trainer_idle'],
      },
      { title: 'Performance', keys: ['perf/step_s', 'perf/weight_sync_s'] },
    ]);
  });

  it("gives a multi-turn run's episodes their own panel, and eval/success to evaluation", () => {
    expect(groupPanels(['env/turns', 'env/tool_calls', 'env/errors', 'env/truncated', 'eval/success', 'grpo/zero_std_groups'])).toEqual([
      { title: 'Groups', keys: ['grpo/zero_std_groups'] },
      { title: 'Environment', keys: ['env/errors', 'env/tool_calls', 'env/truncated', 'env/turns'] },
      { title: 'Eval accuracy & margins', keys: ['eval/success'] },
    ]);
  });

  it('puts the headline key first, then shallower keys', () => {
    expect(groupPanels(['reward/arithmetic', 'reward/std', 'reward/mean'])[0]!.keys).toEqual(['reward/mean', 'reward/arithmetic', 'reward/std']);
    expect(groupPanels(['eval/reward/arithmetic', 'eval/accuracy'])[0]!.keys).toEqual(['eval/accuracy', 'eval/reward/arithmetic']);
  });

  it('omits panels without keys', () => {
    expect(groupPanels(['train/loss'])).toEqual([{ title: 'Losses', keys: ['train/loss'] }]);
    expect(groupPanels([])).toEqual([]);
  });
});

describe('searchKeys', () => {
  it('keeps keys holding every term, ignoring case', () => {
    const keys = ['layers/0/grad_norm', 'layers/10/grad_norm', 'layers/10/weight_norm', 'train/loss'];
    expect(searchKeys(keys, 'GRAD layers/1')).toEqual(['layers/10/grad_norm']);
    expect(searchKeys(keys, '  ')).toEqual(keys);
  });
});
