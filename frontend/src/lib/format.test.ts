import { describe, expect, it } from 'vitest';
import { formatStepTicks, formatTicks } from './format';

describe('formatTicks', () => {
  it('keeps the minus sign of small negative numbers in scientific notation, with short labels', () => {
    expect(formatTicks([-2e-5, -1e-5, 0, 1e-5, 2e-5])).toEqual(['-2e-5', '-1e-5', '0', '1e-5', '2e-5']);
    expect(formatTicks([-1.5e-4, -1e-4, -5e-5])).toEqual(['-1.5e-4', '-1e-4', '-5e-5']);
  });

  it('writes huge values short enough to fit ("1e30", never a clipped "000e+30")', () => {
    expect(formatTicks([0, 5e29, 1e30, 1.5e30])).toEqual(['0', '5e29', '1e30', '1.5e30']);
    expect(formatTicks([-2e6, -1e6, 0])).toEqual(['-2e6', '-1e6', '0']);
  });

  it('uses as many decimals as the tick step needs, and no float noise', () => {
    expect(formatTicks([0, 0.25, 0.5, 0.75])).toEqual(['0', '0.25', '0.50', '0.75']);
    expect(formatTicks([0.1, 0.2, 0.30000000000000004])).toEqual(['0.1', '0.2', '0.3']);
    expect(formatTicks([-1, -0.5, 5.551115123125783e-17, 0.5])).toEqual(['-1.0', '-0.5', '0', '0.5']);
    expect(formatTicks([10, 20, 30])).toEqual(['10', '20', '30']);
    expect(formatTicks([null, 1, 2])).toEqual(['', '1', '2']);
  });

  it('writes each tick of a log axis as short as it goes', () => {
    expect(formatTicks([0.001, null, 0.01, 0.1, 1], true)).toEqual(['0.001', '', '0.01', '0.1', '1']);
  });
});

describe('formatStepTicks', () => {
  it('gives whole steps, shortened past ten thousand', () => {
    expect(formatStepTicks([0, 1, 2, 3])).toEqual(['0', '1', '2', '3']);
    expect(formatStepTicks([0, 5000, 10000, 15000])).toEqual(['0', '5k', '10k', '15k']);
    expect(formatStepTicks([0, 250000, 500000, 1250000])).toEqual(['0', '0.25M', '0.50M', '1.25M']);
  });
});
