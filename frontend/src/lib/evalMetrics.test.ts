import { describe, expect, it } from 'vitest';
import { sortEvalKeys } from './evalMetrics';

describe('sortEvalKeys', () => {
  it('reads accuracy, pass@k by k, reward and its components, length, truncated, then the rest by name', () => {
    const keys = [
      'eval/truncated', 'eval/zeta', 'eval/pass@16', 'eval/reward/format', 'eval/length', 'eval/pass@4', 'eval/loss',
      'eval/reward', 'eval/pass@1', 'eval/accuracy', 'eval/reward/arithmetic', 'eval/pass@4',
    ];
    expect(sortEvalKeys(keys)).toEqual([
      'eval/accuracy', 'eval/pass@1', 'eval/pass@4', 'eval/pass@16', 'eval/reward', 'eval/reward/arithmetic',
      'eval/reward/format', 'eval/length', 'eval/truncated', 'eval/loss', 'eval/zeta',
    ]);
  });
});
