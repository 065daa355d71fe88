"""Asynchronous rollouts (grpo.max_staleness): a generator samples the next steps' batches while the trainer trains.

    trainer (the recipe's step)                        generator (a thread; its engine holds its own weights)
    publish(weights, version)   every sync_every  ──▶  loads, between batches, the oldest weights within the bound
    take(version)               ◀── batches ───────  batch j, sampled at policy version v, tagged with it

Batch j is what step j trains when nothing is dropped. The generator samples it with the oldest published weights of
version j - 1 - max_staleness or newer (waiting for them), so a batch is never trained by a policy more than
max_staleness optimizer steps ahead of the one that sampled it, and at most max_staleness + 1 batches wait. With
max_staleness 0 the generator samples batch j only after step j - 1's weights reach it, while the trainer waits: the
synchronous loop, in two threads.

Why the oldest and not the newest: which weights sample batch j then depends only on j and the publish schedule, never
on which thread ran first, so an asynchronous run is reproducible (with sync_every 1 the generator is exactly
max_staleness steps behind, as veRL's one-step-off and prime-rl's async level are). The newest would only be fresher
when the generator is the slower side, and then the trainer waits on it either way. The cost is memory: published
copies the generator has not reached yet are kept (those between its version and the trainer's: with sync_every 1,
at most max_staleness + 1).

Scoring is a stage of its own where the recipe gives one (`finish`): a scorer thread scores batch j while the
generator draws batch j + 1, so a reward that waits (a verifier's latency, a sandboxed test run) overlaps sampling as
well as training.

A batch that is older than the bound when the trainer takes it is dropped, not refilled, and its prompts are counted
as dropped (`ledger`); the data cursor never goes back, so every prompt drawn is trained or dropped once. The version
gate above makes a drop the exception: a batch restored older than the bound, or a trainer that a drop or a resume
moved ahead. Refilling would sample the same prompts again at a newer version, which a run can have by lowering the
bound instead.

What a checkpoint holds (`state`, `resume_position`): the data cursor before the oldest batch not yet trained or
dropped (queued, or still being sampled), so a resumed run draws those prompts again, at its own version; the
count of groups dropped so far. The ledger (OUT/rollout/ledger.jsonl: one line per batch the trainer took, its step,
version, prompts and fate) is cut back to the checkpoint's step on resume, so across attempts it says what happened
to every prompt drawn, once.

The generator's failures (an engine that died, a policy gone non-finite) end the trainer's next `take` with the same
exception; `close` stops the generator at its next wait and closes its engine.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

LEDGER = Path("rollout") / "ledger.jsonl"
JOIN_S = 60.0  # the most close() waits for a thread in a call that ignores its engine's end (a colocated generate)


class Stopped(Exception):
    """The generator was asked to stop while it waited."""


@dataclass
class Drawn:
    """One batch as the generator made it."""

    batch: int  # the step it is sampled for when nothing is dropped
    version: int  # the policy version (optimizer steps) whose weights sampled it
    position: dict[str, int]  # the data cursor before its prompts were drawn
    prompts: list[int] = field(default_factory=list)  # the dataset indices it drew, in order
    value: Any = None  # what `produce` made of them
    groups: int = 0  # prompts drawn (one group each)


class RecordingOrder:
    """A recipe's BatchOrder as the generator draws from it: each batch's indices noted for the ledger."""

    def __init__(self, order: Any) -> None:
        self.order = order
        self.drawn: list[int] = []

    @property
    def position(self) -> dict[str, int]:
        return self.order.position

    def next_batch(self) -> list[int]:
        batch = self.order.next_batch()
        self.drawn.extend(batch)
        return batch


@dataclass
class Taken:
    """What the trainer gets for a step: the batch, and what the wait for it says about the two sides."""

    drawn: Drawn
    stats: dict[str, float]  # async/*, this step's
    weight_sync_s: float  # the generator's seconds loading weights since the last take


class Overlap:
    """The generator thread and the trainer's side of it. `produce(version, batch)` draws and samples one batch with the
    generator's `engine` (through `order`, a RecordingOrder); `load(weights, version)` gives the engine new weights;
    `finish(value)`, if given, completes a batch (scores it) in a thread of its own, in order, while the next is drawn.
    `delays(side)` runs before each take ("trainer") and each batch ("generator"): tests put random waits there."""

    def __init__(
        self,
        produce: Callable[[int, int], Any],
        load: Callable[[Mapping[str, torch.Tensor] | None, int], None],
        order: RecordingOrder,
        *,
        finish: Callable[[Any], Any] | None = None,
        max_staleness: int,
        sync_every: int,
        version: int,
        ledger: Path | None = None,
        dropped_groups: int = 0,
        delays: Callable[[str], None] | None = None,
        engine: Any = None,
    ) -> None:
        self.produce, self.load, self.order, self.finish = produce, load, order, finish
        self.engine = engine  # the generator's (closed with it)
        self.max_staleness, self.sync_every = max_staleness, sync_every
        self.ledger = ledger
        self.dropped_groups = dropped_groups
        self.delays = delays or (lambda side: None)  # tests: random delays on either side
        self._lock = threading.Condition()
        self._published: dict[int, Mapping[str, torch.Tensor] | None] = {}  # by version, oldest first
        self._last_published: int | None = None
        self._queue: deque[Drawn] = deque()
        self._unfinished: deque[Drawn] = deque()  # drawn, waiting for `finish` (the scorer thread)
        self._pending: deque[Drawn] = deque()  # drawn, not yet taken: in flight or queued (the checkpoint's cursor)
        self._failure: BaseException | None = None
        self._stopping = False
        self._next_batch = version + 1
        self._version = -1  # the version of the weights the generator's engine holds; -1: none given yet
        self._generator_wait_s = 0.0
        self._load_s = 0.0
        self._last_take = time.perf_counter()
        self._thread = threading.Thread(target=self._generate, name="rlplane-generator", daemon=True)
        self._scorer = threading.Thread(target=self._score, name="rlplane-scorer", daemon=True) if finish else None
        self._thread.start()
        if self._scorer is not None:
            self._scorer.start()

    # --- the trainer's side ---

    def due(self, version: int) -> bool:
        """Whether the trainer publishes its weights at `version`: the first time, and every sync_every steps."""
        return self._last_published is None or version - self._last_published >= self.sync_every

    def publish(self, weights: Mapping[str, torch.Tensor] | None, version: int) -> None:
        """The policy's weights at `version` for the generator (a copy it may keep: the trainer goes on updating its
        own); it takes them before its next batch."""
        with self._lock:
            self._published[version] = weights
            self._last_published = version
            self._lock.notify_all()

    def take(self, version: int) -> Taken:
        """The next batch no older than max_staleness at the trainer's `version`, waiting for it; older ones are
        dropped on the way and written to the ledger."""
        started = time.perf_counter()
        self.delays("trainer")
        with self._lock:
            while True:
                while not self._queue and self._failure is None:
                    self._lock.wait(timeout=1.0)
                if self._failure is not None:
                    raise self._failure
                drawn = self._queue.popleft()
                self._pending.popleft()
                depth = len(self._queue)
                if version - drawn.version <= self.max_staleness:
                    break
                self.dropped_groups += drawn.groups
                self._write(version + 1, drawn, "dropped")
            now = time.perf_counter()
            wall = max(now - self._last_take, 1e-9)
            waited = now - started
            generator_idle = min(self._generator_wait_s / wall, 1.0)
            self._generator_wait_s, self._last_take = 0.0, now
            load_s, self._load_s = self._load_s, 0.0
        self._write(version + 1, drawn, "trained")
        staleness = float(version - drawn.version)
        stats = {
            "async/staleness_mean": staleness,
            "async/staleness_max": staleness,
            "async/queue_depth": float(depth),
            "async/dropped_groups": float(self.dropped_groups),
            "async/generator_idle": generator_idle,
            "async/trainer_idle": min(waited / wall, 1.0),
        }
        return Taken(drawn, stats, load_s)

    def resume_position(self, current: dict[str, int]) -> dict[str, int]:
        """The data cursor a checkpoint keeps: before the oldest batch drawn and not yet trained or dropped
        (`current`, the order's own, when there is none)."""
        with self._lock:
            return dict(self._pending[0].position) if self._pending else dict(current)

    def state(self) -> dict[str, Any]:
        """What a checkpoint holds of the generator besides the cursor (plain JSON)."""
        with self._lock:
            return {"dropped_groups": self.dropped_groups, "pending_batches": len(self._pending)}

    def close(self) -> None:
        """Stop the generator and the scorer at their next wait, and close the engine first: a generator blocked on an
        engine that no longer answers (a stopped process, a silent server) wakes with its failure instead of holding
        the trainer's exit."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self.engine is not None:
            self.engine.close()
        for thread in (self._thread, self._scorer):
            if thread is not None:
                thread.join(timeout=JOIN_S)

    def _write(self, step: int, drawn: Drawn, fate: str) -> None:
        if self.ledger is None:
            return
        line = {"step": step, "batch": drawn.batch, "version": drawn.version, "prompts": drawn.prompts, "fate": fate}
        with self.ledger.open("a") as out:
            out.write(json.dumps(line) + "\n")

    # --- the generator's side ---

    def _generate(self) -> None:
        try:
            while True:
                batch = self._next_batch
                weights = self._fresh_weights(batch)
                if weights is not None:
                    started = time.perf_counter()
                    self.load(*weights)
                    with self._lock:
                        self._load_s += time.perf_counter() - started
                        self._version = weights[1]
                version = self._version
                self.delays("generator")
                with self._lock:
                    drawn = Drawn(batch, version, self.order.position)
                    self._pending.append(drawn)
                self.order.drawn = drawn.prompts
                drawn.value = self.produce(version, batch)
                drawn.groups = len(drawn.prompts)
                with self._lock:
                    (self._queue if self.finish is None else self._unfinished).append(drawn)
                    self._next_batch += 1
                    self._lock.notify_all()
        except Stopped:
            return
        except BaseException as exc:  # noqa: BLE001  (the trainer raises it as it was)
            with self._lock:
                self._failure = exc
                self._lock.notify_all()

    def _score(self) -> None:
        """The scorer thread (with `finish`): each drawn batch finished in order, while the generator draws the next,
        so a reward that waits (a verifier's latency) overlaps sampling as well as training."""
        try:
            while True:
                with self._lock:
                    while not self._unfinished and not self._stopping and self._failure is None:
                        self._lock.wait(timeout=1.0)
                    if self._stopping or self._failure is not None:
                        return
                    drawn = self._unfinished[0]
                assert self.finish is not None
                drawn.value = self.finish(drawn.value)
                with self._lock:
                    self._unfinished.popleft()
                    self._queue.append(drawn)
                    self._lock.notify_all()
        except BaseException as exc:  # noqa: BLE001  (the trainer raises it as it was)
            with self._lock:
                self._failure = exc
                self._lock.notify_all()

    def _fresh_weights(self, batch: int) -> tuple[Mapping[str, torch.Tensor] | None, int] | None:
        """Wait until the generator's own weights or published ones are new enough for `batch` (version >= batch - 1 -
        max_staleness); the oldest such published ones when the generator's own are older, else None. Published
        copies older than what it takes are never needed again (the bound only moves forward) and are let go."""
        needed = max(batch - 1 - self.max_staleness, 0)
        started = time.perf_counter()
        with self._lock:
            while not self._stopping:
                if self._version >= needed:  # and some weights at all (-1 is none): never the engine's start
                    self._generator_wait_s += time.perf_counter() - started
                    return None
                fresh = [version for version in self._published if version >= needed]
                if fresh:
                    break
                self._lock.wait(timeout=1.0)
            self._generator_wait_s += time.perf_counter() - started
            if self._stopping:
                raise Stopped
            version = min(fresh)
            weights = self._published.pop(version)
            for older in [old for old in self._published if old < version]:
                del self._published[older]
            return weights, version


@dataclass(kw_only=True)
class GeneratorSide:
    """What the recipe's sampling reads of a run, as the generator sees it: its own engine and policy (a copy, or the
    one a vllm server was started from), the run's prompts through the recording order, and `step`, the version its
    engine holds (so sampling never pushes weights itself)."""

    spec: Any
    backend: Any
    tokenizer: Any
    reward: Any
    environment: Any
    train_rows: list[dict]
    order: RecordingOrder
    engine: Any
    policy: Any
    out_dir: Path
    reporter: Any
    step: int = 0
    weight_sync_s: float = 0.0

    @property
    def model(self) -> Any:
        return self.policy


class Serialized:
    """A reward used from two threads (the generator scores its batches, the trainer its samples and evaluations):
    one call at a time, and `lock` held across a save-score-restore (rollouts.unchanged) so the generator's updates
    of a running normaliser are not undone by it."""

    def __init__(self, reward: Any) -> None:
        self.reward = reward
        self.lock = threading.RLock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return self.reward(*args, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        with self.lock:
            return self.reward.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self.lock:
            self.reward.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reward, name)


def cut_ledger(out_dir: Path, step: int) -> None:
    """On resume from the checkpoint of `step`: the ledger keeps what happened up to it; the steps after it are
    trained again."""
    path = out_dir / LEDGER
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept))
