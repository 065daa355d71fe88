import { describe, expect, it } from 'vitest';
import type { Trial } from '../../api/sweeps';
import { sweepTrial } from '../../test/fixtures';
import { formatParam, nextSort, sortTrials } from './values';

const trials: Trial[] = [
  sweepTrial(1, {}, { value: 0.9 }),
  sweepTrial(2, {}, { value: null }),
  sweepTrial(3, {}, { value: 'Infinity' }),
  sweepTrial(4, {}, { value: 'NaN' }),
  sweepTrial(5, {}, { value: 0.42 }),
  sweepTrial(6, {}, { value: 0.9 }),
];
const order = (list: Trial[]) => list.map((t) => t.number);

describe('sortTrials', () => {
  it('orders by value either way, infinities among the numbers, ties by number, NaN then no value last', () => {
    expect(order(sortTrials(trials, { column: 'value', direction: 'ascending' }))).toEqual([5, 1, 6, 3, 4, 2]);
    expect(order(sortTrials(trials, { column: 'value', direction: 'descending' }))).toEqual([3, 1, 6, 5, 4, 2]);
    expect(order(sortTrials(trials, { column: 'number', direction: 'descending' }))).toEqual([6, 5, 4, 3, 2, 1]);
  });
});

describe('nextSort', () => {
  it('sorts the metric best first on the first click, then reverses', () => {
    const byNumber = { column: 'number', direction: 'ascending' } as const;
    expect(nextSort(byNumber, 'value', 'min')).toEqual({ column: 'value', direction: 'ascending' });
    expect(nextSort(byNumber, 'value', 'max')).toEqual({ column: 'value', direction: 'descending' });
    expect(nextSort({ column: 'value', direction: 'descending' }, 'value', 'max')).toEqual({ column: 'value', direction: 'ascending' });
    expect(nextSort(byNumber, 'number', 'min')).toEqual({ column: 'number', direction: 'descending' });
  });
});

describe('formatParam', () => {
  it('writes four significant digits, strings as they are, anything else as JSON', () => {
    expect([0.00031622776601683794, 1e-5, 16, 1e-7, 'adamw', true, null, [1, 2], undefined].map(formatParam)).toEqual([
      '0.0003162', '0.00001', '16', '1e-7', 'adamw', 'true', 'null', '[1,2]', '—',
    ]);
  });
});
