import { describe, expect, it } from 'vitest';
import { priorityName } from './priority';

describe('priorityName', () => {
  it('names the spec named values and leaves the others as numbers', () => {
    expect([25, 50, 75, 100, 60].map(priorityName)).toEqual(['25 (low)', '50 (normal)', '75 (high)', '100 (urgent)', '60']);
  });
});
