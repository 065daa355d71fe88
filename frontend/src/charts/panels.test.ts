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

  it('gives the PPO and GRPO diagnostics their own panel, not Other', () => {
    const keys = ['ppo/clipfrac', 'ppo/approx_kl', 'ppo/entropy', 'ppo/value_clipfrac', 'ppo/kl', 'ppo/policy_loss',
      'grpo/clipfrac', 'grpo/zero_std_groups', 'grpo/kl', 'train/skipped_steps', 'values/mean', 'gen/response_length'];
    expect(groupPanels(keys)).toEqual([
      { title: 'KL', keys: ['grpo/kl', 'ppo/kl'] },
      { title: 'Losses', keys: ['ppo/policy_loss'] },
      {
        title: 'PPO diagnostics',
        keys: ['values/mean', 'gen/response_length', 'grpo/clipfrac', 'grpo/zero_std_groups', 'ppo/approx_kl', 'ppo/clipfrac', 'ppo/entropy', 'ppo/value_clipfrac'],
      },
      { title: 'Gradient norm', keys: ['train/skipped_steps'] },
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
