"""Sharing a cluster with real workers. A high-priority run submitted while a low one trains on a one-worker queue
preempts it: the low run is handed back (its trainer checkpoints after its current step; not counted against
max_attempts), the high one starts on the freed worker within a minute, and the low one resumes once it is done,
every step once. A project at its quota waits, saying why, while another project's run starts. Real processes: an
`rlplane api` (its reconcile loop decides), `rlplane worker`s (Celery on Redis), Postgres, the trainers."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.harness.worker_stack import LONG, SPEC, Stack, assert_metrics_once

STEPS = 2000  # long enough to be still training when the high-priority run comes (about 30 s on one core)
LOW = {**LONG, "name": "low", "train": {**LONG["train"], "steps": STEPS, "eval_every": 1000, "checkpoint_every": 500}}


def test_a_high_priority_run_preempts_a_low_one_which_resumes_after_it_every_step_once(tmp_path: Path) -> None:
    stack = Stack(tmp_path, api_env={"RLPLANE_PREEMPT_AFTER_S": "3"})
    try:
        stack.start_worker("w1")
        low = stack.submit({**LOW, "resources": {"queue": "cpu", "priority": "low", "max_attempts": 1}})
        stack.wait_step(low, 100)
        submitted = time.monotonic()
        high = stack.submit({**SPEC, "name": "high", "resources": {"queue": "cpu", "priority": "high"}})
        stack.wait_status(high, {"running", "succeeded"}, timeout=60)
        assert time.monotonic() - submitted < 60
        preempted = stack.run(low)
        assert preempted["status"] == "queued" and preempted["priority"] == 25, preempted["status_reason"]
        [attempt] = preempted["attempts"]
        assert attempt["preempted_by"] == high and attempt["handed_back"], attempt
        checkpointed = re.match(rf"handed back: preempted by run {high}; checkpointed at step (\d+)", attempt["end_reason"])
        assert checkpointed, attempt["end_reason"]
        assert stack.wait_status(high, {"succeeded", "failed"})["status"] == "succeeded"

        done = stack.wait_status(low, {"succeeded", "failed"}, timeout=300)
        assert done["status"] == "succeeded", done["status_reason"]
        first, second = done["attempts"]
        assert second["started_at"] > stack.run(high)["ended_at"]  # it waited for the high one to end
        logs = [line["text"] for line in stack.http.get(f"/runs/{low}/logs", params={"limit": 2000}).json()["data"]]
        step = int(checkpointed.group(1))
        assert any(f"step-{step:06d} at step {step}" in text for text in logs)  # resumed at the hand-back's checkpoint
        assert_metrics_once(stack, low, STEPS)
    finally:
        stack.close()


def test_a_project_at_its_quota_waits_with_the_reason_while_another_projects_run_starts(tmp_path: Path) -> None:
    """Project vision may hold one run of queue cpu. With two workers, its second run waits, saying why, while a run
    of project default starts on the other worker; once vision's first run is cancelled, its second starts."""
    stack = Stack(tmp_path)
    try:
        assert stack.http.post("/projects", json={"name": "vision"}).status_code == 201
        assert stack.http.put("/projects/vision/quotas/cpu", json={"max_runs": 1}).status_code == 200
        stack.start_worker("w1")
        stack.start_worker("w2")
        first = stack.submit({**LOW, "name": "vision-1", "project": "vision"})
        stack.wait_step(first, 10)
        second = stack.submit({**SPEC, "name": "vision-2", "project": "vision"})
        other = stack.submit({**SPEC, "name": "default-1"})
        assert stack.wait_status(other, {"succeeded", "failed"})["status"] == "succeeded"  # on the worker vision can't use
        waiting = stack.run(second)
        assert waiting["status"] == "queued" and waiting["attempts"] == [], waiting
        assert waiting["status_reason"] == "project vision is at its quota: 1 of 1 runs on queue cpu"
        assert stack.http.post(f"/runs/{first}/cancel").status_code == 200
        assert stack.wait_status(second, {"succeeded", "failed"})["status"] == "succeeded"
    finally:
        stack.close()
