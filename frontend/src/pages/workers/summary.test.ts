import { describe, expect, it } from 'vitest';
import { formatAgo, formatGpuMemory, gpuModels, summarizeQueues, type Worker } from './summary';

const worker = (over: Partial<Worker>): Worker => ({
  name: 'w', hostname: 'host', address: '', queues: ['cpu'], capacity: 1, gpus: [], current_run_id: null, current_run_status: null,
  last_step: null, first_seen: '2025-01-01T00:00:00Z', last_heartbeat: '2025-01-01T00:00:00Z',
  seconds_since_heartbeat: 3, stale: false, ...over,
});
const gpu = (index: number, name = 'H100') => ({ index, name, memory_total_mb: 81920, memory_used_mb: 1024, utilization: 50 });

describe('summarizeQueues', () => {
  it('counts busy, idle and stale per queue, a multi-queue worker in each', () => {
    const rows = summarizeQueues([
      worker({ name: 'a', queues: ['gpu', 'cpu'], gpus: [gpu(0), gpu(1)], current_run_id: 4, current_run_status: 'running' }),
      worker({ name: 'b', queues: ['cpu'] }),
      worker({ name: 'c', queues: ['gpu'], gpus: [gpu(0)], stale: true, current_run_id: 5 }),
      worker({ name: 'd', queues: ['gpu'], current_run_status: 'running' }), // run hidden from this user
    ]);
    expect(rows).toEqual([
      { queue: 'cpu', workers: 2, busy: 1, idle: 1, stale: 0, gpus: 2 },
      { queue: 'gpu', workers: 3, busy: 2, idle: 0, stale: 1, gpus: 3 },
    ]);
  });

  it('counts a gang\'s node as busy before its run starts', () => {
    const gang = { run_id: 4, attempt: 1, node_rank: 1, nodes: 2, workers: ['a', 'b'] };
    expect(summarizeQueues([worker({ name: 'b', gang })])).toEqual([{ queue: 'cpu', workers: 1, busy: 1, idle: 0, stale: 0, gpus: 0 }]);
  });
});

describe('formatting', () => {
  it('says how long ago and what GPUs', () => {
    expect(formatAgo(12.4)).toBe('12 s ago');
    expect(formatAgo(600)).toBe('10 min ago');
    expect(formatAgo(7200)).toBe('2 h ago');
    expect(formatAgo(3 * 86400)).toBe('3 d ago');
    expect(gpuModels([gpu(0), gpu(1), gpu(2, 'A10')])).toBe('2 × H100, 1 × A10');
    expect(formatGpuMemory(null, 81920)).toBe('— / 80.0 GiB');
    expect(formatGpuMemory(40960, 81920)).toBe('40.0 / 80.0 GiB');
  });
});
