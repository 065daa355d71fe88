import { afterEach, describe, expect, it, vi } from 'vitest';
import { act, fireEvent, screen } from '@testing-library/react';
import { json, runDetail } from '../../test/fixtures';
import { renderTab } from '../../test/renderTab';
import type { LogLine } from '../../api/types';
import { clockTime, fullTime, MAX_LINES } from './logLines';
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

  it('holds the last 5,000 of 20,000 lines, says so, renders only a window of them and follows the bottom', async () => {
    const line = (id: number): LogLine => ({
      id, attempt: 1, rank: 0, node: 0, seq: id, time: 1_700_000_000 + id, text: id === 17_000 ? 'Traceback: boom' : `step ${id}`,
    });
    const lines = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => line(from + i));
    vi.stubGlobal('fetch', vi.fn(async () => json({ data: lines(1, 500), next_offset: 500 })));
    const { context } = renderTab(<LogsTab />, runDetail());
    await screen.findByText('step 500');
    for (let from = 501; from <= 20_000; from += 1_000) {
      act(() => context.bus.emit({ event: 'logs', data: JSON.stringify(lines(from, Math.min(from + 999, 20_000))), id: '' }));
    }

    const box = screen.getByRole('log');
    const rendered = () => [...box.querySelectorAll<HTMLElement>('.log-line')].map((el) => Number(el.dataset.lineId));
    expect(box.dataset.lines).toBe(String(MAX_LINES));
    expect(rendered().length).toBeLessThan(100);
    expect(rendered().at(-1)).toBe(20_000); // following: the newest line is in view
    expect(rendered()).not.toContain(15_001);
    expect(screen.getByTestId('logs-dropped').textContent).toMatch(/^15,000 older lines were dropped: this page keeps the last 5,000\. The whole log: rlplane logs 7/);

    fireEvent.click(screen.getByRole('checkbox', { name: 'Follow' }));
    box.scrollTop = 0;
    fireEvent.scroll(box);
    expect(rendered()[0]).toBe(15_001); // the oldest held line

    fireEvent.click(screen.getByRole('button', { name: 'Jump to first error' }));
    expect(rendered()).toContain(17_000);
    expect((document.activeElement as HTMLElement).dataset.lineId).toBe('17000');

    fireEvent.change(screen.getByLabelText('Search'), { target: { value: 'step 1999' } });
    expect(box.dataset.lines).toBe('10'); // 19990..19999: step 1999 itself was dropped
    expect(rendered()).toEqual([19_990, 19_991, 19_992, 19_993, 19_994, 19_995, 19_996, 19_997, 19_998, 19_999]);
  });

  it('formats times in the local zone, zero-padded', () => {
    const t = new Date(2024, 11, 31, 23, 0, 9).getTime() / 1000;
    expect(clockTime(t)).toBe('23:00:09');
    expect(fullTime(t)).toBe('2024-12-31 23:00:09.000');
  });
});
