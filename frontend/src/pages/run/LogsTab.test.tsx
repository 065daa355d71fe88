import { afterEach, describe, expect, it, vi } from 'vitest';
import { screen } from '@testing-library/react';
import { json, runDetail } from '../../test/fixtures';
import { renderTab } from '../../test/renderTab';
import { clockTime, fullTime } from './logLines';
import { LogsTab } from './LogsTab';

afterEach(() => vi.unstubAllGlobals());

describe('LogsTab', () => {
  it('shows when each line was printed as HH:MM:SS, with the full date on hover', async () => {
    const printed = new Date(2025, 2, 4, 9, 5, 7, 250).getTime() / 1000;
    vi.stubGlobal('fetch', vi.fn(async () =>
      json({ data: [{ id: 1, attempt: 1, rank: 0, seq: 0, text: 'step 1 loss 2.3', time: printed }], next_offset: 1 }),
    ));
    renderTab(<LogsTab />, runDetail());
    const line = (await screen.findByText(/step 1 loss 2.3/)).closest('.log-line')!;
    const time = line.querySelector('time')!;
    expect(time.textContent).toBe('09:05:07');
    expect(time.getAttribute('title')).toBe('2025-03-04 09:05:07.250');
    expect(line.textContent).toBe('09:05:07 step 1 loss 2.3');
  });

  it('formats times in the local zone, zero-padded', () => {
    const t = new Date(2024, 11, 31, 23, 0, 9).getTime() / 1000;
    expect(clockTime(t)).toBe('23:00:09');
    expect(fullTime(t)).toBe('2024-12-31 23:00:09.000');
  });
});
