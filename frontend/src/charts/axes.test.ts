import { describe, expect, it } from 'vitest';
import { STEP_INCRS, xRange, yAxisSize, yRange } from './axes';

describe('axes', () => {
  it('gives a constant series a range around its value, not 0..100', () => {
    expect(yRange(0, 0)).toEqual([-1, 1]);
    expect(yRange(5, 5)).toEqual([4.5, 5.5]);
    expect(yRange(-2, -2)).toEqual([-2.2, -1.8]);
    expect(yRange(null, null)).toEqual([0, 1]);
    expect(yRange(0, 10)).toEqual([-0.5, 10.5]);
  });

  it('widens a single step and ticks steps at whole numbers only', () => {
    expect(xRange(3, 3)).toEqual([2, 4]);
    expect(xRange(0, 2)).toEqual([0, 2]);
    expect(STEP_INCRS.slice(0, 4)).toEqual([1, 2, 5, 10]);
    expect(STEP_INCRS.every((v) => Number.isInteger(v))).toBe(true);
  });

  it('sizes the y axis for its widest label', () => {
    const width = (s: string) => s.length * 7;
    expect(yAxisSize(['-1e-5', '0'], width)).toBe(35 + 21);
    expect(yAxisSize(['-1.5e30', '1e30'], width)).toBeGreaterThan(yAxisSize(['1', '2'], width));
    expect(yAxisSize(null, width)).toBe(21 + 21);
  });
});
