import { describe, expect, it } from 'vitest';
import { compactNumber } from './columns';

describe('compactNumber', () => {
  it('writes learning rates short and batch sizes whole', () => {
    expect(compactNumber(0.00030000000000000003)).toBe('3e-4');
    expect(compactNumber(1e-5)).toBe('1e-5');
    expect(compactNumber(1.5e-4)).toBe('1.5e-4');
    expect(compactNumber(0.001)).toBe('0.001');
    expect(compactNumber(0.95)).toBe('0.95');
    expect(compactNumber(64)).toBe('64');
    expect(compactNumber(0)).toBe('0');
    expect(compactNumber(2.5e7)).toBe('2.5e7');
  });
});
