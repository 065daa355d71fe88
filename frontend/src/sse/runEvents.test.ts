import { describe, expect, it } from 'vitest';
import { RunEventBus, type LiveColumns } from './runEvents';

describe('RunEventBus', () => {
  it('gives metrics listeners each point its time back from the milliseconds the stream sends', () => {
    const bus = new RunEventBus();
    const got: LiveColumns[][] = [];
    bus.on('metrics', (series) => got.push(series));
    const wire = [{ key: 'train/loss', step: [3, 4], value: [0.5, 'NaN'], time0: 1764000010.25, time_ms: [0, -1127] }];
    bus.emit({ event: 'metrics', data: JSON.stringify(wire), id: 'c' });
    expect(got).toHaveLength(1);
    const [series] = got[0]!;
    expect(series!.key).toBe('train/loss');
    expect(series!.step).toEqual([3, 4]);
    expect(series!.value).toEqual([0.5, 'NaN']);
    expect(series!.time[0]).toBe(1764000010.25);
    expect(series!.time[1]).toBeCloseTo(1764000009.123, 6);
  });

  it('drops a malformed message without calling anyone', () => {
    const bus = new RunEventBus();
    let calls = 0;
    bus.on('metrics', () => calls++);
    bus.emit({ event: 'metrics', data: '[{"key": "k"', id: 'c' });
    bus.emit({ event: 'metrics', data: '[{"key": "k"}]', id: 'c' }); // no columns: not a metrics message
    expect(calls).toBe(0);
  });
});
