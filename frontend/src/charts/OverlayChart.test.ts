import { describe, expect, it, vi } from 'vitest';
import { nearestValue } from './OverlayChart';

// uPlot reads matchMedia at import, which jsdom lacks; only the pure helper is tested here.
vi.mock('uplot', () => ({ default: class {} }));

describe('nearestValue', () => {
  it('takes the nearest point inside the series and nothing outside it', () => {
    const col = [null, 1, null, null, 4, null, null];
    expect(nearestValue(col, 1)).toBe(1);
    expect(nearestValue(col, 2)).toBe(1);
    expect(nearestValue(col, 3)).toBe(4);
    expect(nearestValue(col, 0)).toBeNull();
    expect(nearestValue(col, 5)).toBeNull();
  });
});
