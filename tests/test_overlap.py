"""The generator-trainer overlap of asynchronous GRPO (trainer_core/rollout/overlap.py) as a machine of its own: a
generator thread drawing batches through a real BatchOrder, a trainer loop taking them, random delays on both sides.
What it must keep whatever the timing: no batch trained older than the bound, none trained twice, each sampled with the
same weights (the oldest published within the bound: a run is reproducible), every prompt drawn trained or dropped
once (the ledger), the cursor a checkpoint keeps before everything not yet trained, and a generator failure raised in
the trainer as it was."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest

from trainer_core.failures import Diverged
from trainer_core.recipes.common import BatchOrder
from trainer_core.rollout.overlap import Overlap, RecordingOrder, cut_ledger

PROMPTS, BATCH = 50, 4


def start(
    tmp_path: Path, max_staleness: int, sync_every: int = 1, seed: int = 0, fail_at: int | None = None, scorer: bool = False
):
    """An Overlap whose generator draws BATCH prompts a batch from a shuffled order of PROMPTS, noting the version it
    sampled each with; random waits of up to 4 ms on both sides. With `scorer`, a scoring stage in a thread of its own
    finishes each batch (after a random wait of its own), marking it scored."""
    order = RecordingOrder(BatchOrder(PROMPTS, BATCH, seed=seed, shuffle=True))
    loaded: list[int] = []
    chance = random.Random(seed)
    lock = threading.Lock()

    def delay(side: str) -> None:
        with lock:
            wait = chance.random() * 0.004
        time.sleep(wait)

    def produce(version: int, batch: int) -> dict:
        if not scorer and fail_at is not None and len(loaded) and order.order.index >= fail_at * BATCH:
            raise Diverged("diverged: the policy's next-token logits are NaN or infinite while generating")
        return {"prompts": order.next_batch(), "version": version}

    def finish(value: dict) -> dict:
        delay("scorer")
        if fail_at is not None and value["prompts"] == expected_at(fail_at):
            raise Diverged("diverged: the policy's next-token logits are NaN or infinite while generating")
        return {**value, "scored": True}

    def expected_at(batch: int) -> list[int]:
        plain = BatchOrder(PROMPTS, BATCH, seed=seed, shuffle=True)
        return [plain.next_batch() for _ in range(batch)][-1]

    overlap = Overlap(
        produce,
        lambda weights, version: loaded.append(version),
        order,
        finish=finish if scorer else None,
        max_staleness=max_staleness,
        sync_every=sync_every,
        version=0,
        ledger=tmp_path / "ledger.jsonl",
        delays=delay,
    )
    return overlap, loaded


def ledger(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "max_staleness, sync_every, scorer", [(0, 1, False), (1, 1, False), (2, 3, False), (4, 2, False), (0, 1, True), (2, 1, True)]
)
def test_random_delays_never_train_a_batch_older_than_the_bound_or_twice(
    tmp_path: Path, max_staleness: int, sync_every: int, scorer: bool
) -> None:
    overlap, loaded = start(tmp_path, max_staleness, sync_every, seed=max_staleness, scorer=scorer)
    taken = []
    try:
        for version in range(20):
            if overlap.due(version):
                overlap.publish({}, version)
            got = overlap.take(version)
            assert got.drawn.value["version"] == got.drawn.version and got.drawn.value.get("scored", False) == scorer
            assert 0 <= version - got.drawn.version <= max_staleness
            assert got.stats["async/staleness_max"] == version - got.drawn.version
            assert 0 <= got.stats["async/trainer_idle"] <= 1 and 0 <= got.stats["async/generator_idle"] <= 1
            taken.append(got.drawn)
            time.sleep(random.random() * 0.004)  # the trainer's step
    finally:
        overlap.close()
    assert not overlap._thread.is_alive()
    assert [drawn.batch for drawn in taken] == list(range(1, 21))  # each once, in order
    published = range(0, 20, sync_every)
    oldest_within = [min(v for v in published if v >= max(batch - 1 - max_staleness, 0)) for batch in range(1, 21)]
    assert [drawn.version for drawn in taken] == oldest_within  # whichever thread ran first
    assert loaded == sorted(set(loaded)) and all(v % sync_every == 0 for v in loaded)  # weights only move forward
    lines = ledger(tmp_path)
    assert [line["fate"] for line in lines] == ["trained"] * 20
    expected = BatchOrder(PROMPTS, BATCH, seed=max_staleness, shuffle=True)
    assert [line["prompts"] for line in lines] == [expected.next_batch() for _ in range(20)]


def test_a_batch_older_than_the_bound_is_dropped_and_its_prompts_counted(tmp_path: Path) -> None:
    """A trainer that moved further ahead than the generator was told (here: its version jumps by 3 every fifth take)
    finds batches older than the bound: they are dropped, counted and written to the ledger, and consumed = trained +
    dropped over prompts drawn in order, none twice."""
    overlap, _ = start(tmp_path, max_staleness=1, seed=7)
    version, trained = 0, 0
    try:
        for take in range(15):
            overlap.publish({}, version)
            got = overlap.take(version)
            assert version - got.drawn.version <= 1
            trained += 1
            version += 3 if take % 5 == 4 else 1
    finally:
        overlap.close()
    lines = ledger(tmp_path)
    dropped = [line for line in lines if line["fate"] == "dropped"]
    assert dropped and overlap.dropped_groups == BATCH * len(dropped)
    assert len(lines) - len(dropped) == trained
    drawn = [index for line in lines for index in line["prompts"]]
    expected = BatchOrder(PROMPTS, BATCH, seed=7, shuffle=True)
    assert drawn == [i for _ in range(len(lines)) for i in expected.next_batch()]


def test_a_checkpoint_keeps_the_cursor_before_every_batch_not_yet_trained(tmp_path: Path) -> None:
    """With batches queued ahead, the checkpoint's cursor is where the first untrained one was drawn, and a resume
    (its ledger cut back to the checkpoint's step) draws them again: trained prompts are never drawn twice."""
    overlap, _ = start(tmp_path, max_staleness=2)
    try:
        for version in range(3):
            overlap.publish({}, version)
            overlap.take(version)
        deadline = time.monotonic() + 10
        while overlap.state()["pending_batches"] < 2 and time.monotonic() < deadline:  # batches 4 and 5 drawn ahead
            time.sleep(0.01)
        assert overlap.state()["pending_batches"] >= 2
        position = overlap.resume_position(overlap.order.position)
        assert position["index"] == 3 * BATCH and overlap.order.position["index"] > 3 * BATCH
    finally:
        overlap.close()
    with (tmp_path / "ledger.jsonl").open("a") as out:  # a step 4 that the killed attempt took but never checkpointed
        out.write(json.dumps({"step": 4, "batch": 4, "version": 3, "prompts": [0], "fate": "trained"}) + "\n")
    (tmp_path / "rollout").mkdir()
    (tmp_path / "ledger.jsonl").rename(tmp_path / "rollout" / "ledger.jsonl")
    cut_ledger(tmp_path, 3)
    assert [json.loads(line)["step"] for line in (tmp_path / "rollout" / "ledger.jsonl").read_text().splitlines()] == [1, 2, 3]


@pytest.mark.parametrize("scorer", [False, True], ids=["sampling", "scoring"])
def test_a_generator_failure_ends_the_trainers_take_with_its_reason(tmp_path: Path, scorer: bool) -> None:
    overlap, _ = start(tmp_path, max_staleness=1, fail_at=2, scorer=scorer)
    try:
        with pytest.raises(Diverged, match="NaN or infinite while generating"):
            for version in range(10):
                overlap.publish({}, version)
                overlap.take(version)
    finally:
        overlap.close()
    assert not overlap._thread.is_alive() and (overlap._scorer is None or not overlap._scorer.is_alive())


def test_close_stops_a_generator_that_waits_for_weights(tmp_path: Path) -> None:
    overlap, loaded = start(tmp_path, max_staleness=0)
    time.sleep(0.05)  # nothing published: it waits
    overlap.close()
    assert not overlap._thread.is_alive() and loaded == []
