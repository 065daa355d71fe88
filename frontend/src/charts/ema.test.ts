import { describe, expect, it } from 'vitest';
import { ema } from './ema';

describe('ema', () => {
  it('returns a copy when weight is 0', () => {
    const v = [1, 2, null, 4];
    expect(ema(v, 0)).toEqual(v);
  });

  it('is debiased: a constant series stays constant from the first point', () => {
    expect(ema([5, 5, 5, 5], 0.9).map((x) => x!.toFixed(10))).toEqual(Array(4).fill((5).toFixed(10)));
  });

  it('smooths toward the mean and keeps gaps as gaps', () => {
    const out = ema([0, 10, null, 0, 10], 0.5);
    expect(out[0]).toBe(0);
    expect(out[1]).toBeCloseTo(10 * 0.5 / 0.75); // debiased: (0.5*10)/(1-0.25)
    expect(out[2]).toBeNull();
    expect(out[4]).toBeGreaterThan(out[3]!);
    expect(out[4]).toBeLessThan(10);
  });
});

describe('ema on a column shared with other runs', () => {
  it('keeps "no point here" (undefined) apart from NaN gaps (null)', () => {
    const out = ema([1, undefined, null, 3], 0.5);
    expect(out[1]).toBeUndefined();
    expect(out[2]).toBeNull();
    expect(out[3]).toBeGreaterThan(1);
  });
});
