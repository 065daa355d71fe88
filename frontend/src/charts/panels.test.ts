import { describe, expect, it } from 'vitest';
import { groupPanels } from './panels';

describe('groupPanels', () => {
  it('groups RLHF keys into known panels in reading order, the rest last', () => {
    const keys = [
      'perf/step_s', 'train/lr', 'custom/thing', 'train/loss', 'eval/loss', 'ppo/kl', 'ppo/kl_coef',
      'reward/mean', 'rewards/margin', 'eval/accuracy', 'eval/margin', 'train/grad_norm', 'ppo/value_loss',
    ];
    expect(groupPanels(keys)).toEqual([
      { title: 'Reward', keys: ['reward/mean', 'rewards/margin'] },
      { title: 'KL', keys: ['ppo/kl', 'ppo/kl_coef'] },
      { title: 'Losses', keys: ['eval/loss', 'ppo/value_loss', 'train/loss'] },
      { title: 'Eval accuracy & margins', keys: ['eval/accuracy', 'eval/margin'] },
      { title: 'Learning rate', keys: ['train/lr'] },
      { title: 'Gradient norm', keys: ['train/grad_norm'] },
      { title: 'Performance', keys: ['perf/step_s'] },
      { title: 'Other', keys: ['custom/thing'] },
    ]);
  });

  it('omits panels without keys', () => {
    expect(groupPanels(['train/loss'])).toEqual([{ title: 'Losses', keys: ['train/loss'] }]);
    expect(groupPanels([])).toEqual([]);
  });
});
