"""The load: trainer-like metric batches, concurrent ingest and sequential latency, each with its CPU use."""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from ingestbench.processes import CpuMeter
from ingestbench.systems import Request, System, expect

KEYS_PER_BATCH = 10  # a 100-point batch is 10 keys x 10 consecutive steps, like a trainer logging every step


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already-sorted values."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def batches_for(points: int, batch: int, base_time: float) -> Iterator[list[tuple[str, int, float, float]]]:
    """Points of one run, as a trainer logs them: KEYS_PER_BATCH keys per step, steps increasing, cut into batches."""
    keys = [f"train/metric_{k}" for k in range(KEYS_PER_BATCH)]
    chunk: list[tuple[str, int, float, float]] = []
    for i in range(points):
        step, k = divmod(i, KEYS_PER_BATCH)
        chunk.append((keys[k], step, 1.0 / (step + 1) + 0.01 * k, base_time + step * 0.01))
        if len(chunk) == batch:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def ingest_throughput(system: System, points: int, clients: int, batch: int, tag: str) -> dict[str, Any]:
    """`clients` threads, each logging into its own fresh run over one keep-alive connection.

    Request bodies are encoded before the clock starts; the clock runs from a common start until the last
    response arrived.
    """
    per_client = points // clients
    with system.client() as client:
        runs = [system.create_run(client, f"ingest-{tag}-{c}") for c in range(clients)]
    now = time.time()
    bodies = [[system.batch(run, chunk) for chunk in batches_for(per_client, batch, now)] for run in runs]
    barrier = threading.Barrier(clients + 1)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    finished = [0.0] * clients
    errors: list[BaseException] = []

    def work(c: int) -> None:
        try:
            with system.client() as client:
                expect(client.get(system.health_path))  # open the keep-alive connection before the clock starts
                barrier.wait(timeout=60)
                for request in bodies[c]:
                    t0 = time.perf_counter()
                    response = client.request(request.method, request.url, content=request.body)
                    latencies[c].append(time.perf_counter() - t0)
                    system.check_batch(response, request.n)
                finished[c] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            barrier.abort()

    meter = CpuMeter(system.server, system.db)
    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    try:
        barrier.wait(timeout=120)
    except threading.BrokenBarrierError:
        pass
    start = meter.snapshot()
    for t in threads:
        t.join()
    end = meter.snapshot()
    if errors:
        raise errors[0]
    elapsed = max(finished) - start[0]
    sent = per_client * clients
    flat = sorted(x for lat in latencies for x in lat)
    return {
        "points": sent,
        "seconds": round(elapsed, 3),
        "points_per_s": sent / elapsed,
        "batch_p50_ms": round(percentile(flat, 0.5) * 1000, 3),
        "batch_p99_ms": round(percentile(flat, 0.99) * 1000, 3),
        "cpu_cores_used": meter.shares(start, end),
    }


def sequential_latency(system: System, requests: list[Request], check: Callable[[httpx.Response], None]) -> dict[str, Any]:
    """One client, one keep-alive connection, one request at a time: the latency a caller sees with no queueing."""
    meter = CpuMeter(system.server, system.db)
    with system.client() as client:
        expect(client.get(system.health_path))
        samples = []
        start = meter.snapshot()
        for request in requests:
            t0 = time.perf_counter()
            response = client.request(request.method, request.url, content=request.body)
            samples.append(time.perf_counter() - t0)
            check(response)
        end = meter.snapshot()
    samples.sort()
    return {
        "p50_ms": percentile(samples, 0.5) * 1000,
        "p99_ms": percentile(samples, 0.99) * 1000,
        "mean_ms": statistics.fmean(samples) * 1000,
        "n": len(samples),
        "cpu_cores_used": meter.shares(start, end),
    }


def single_point_latency(system: System, n: int, tag: str) -> dict[str, float]:
    with system.client() as client:
        run = system.create_run(client, f"latency-{tag}")
    now = time.time()
    requests = [system.single(run, ("train/loss", i, 1.0 / (i + 1), now + i * 0.01)) for i in range(n)]
    return sequential_latency(system, requests, lambda r: system.check_batch(r, 1))


def list_latency(system: System, variant: str, n: int) -> dict[str, float]:
    request = system.list_requests()[variant]
    return sequential_latency(system, [request] * n, lambda r: expect(r))


def floor_latency(system: System, n: int) -> dict[str, float]:
    """A request that does no work: the client + HTTP stack floor under every latency above."""
    return sequential_latency(system, [Request("GET", system.health_path)] * n, lambda r: expect(r))
