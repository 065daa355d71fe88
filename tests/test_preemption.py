"""A high-priority run submitted while a low one trains on a one-worker queue preempts it: the low run is handed back
(its trainer checkpoints after its current step; not counted against max_attempts), the high one starts on the freed
worker within a minute, and the low one resumes once it is done, every step once. Real processes: an `rlplane api`
(its reconcile loop decides the preemption), one `rlplane worker` (Celery on Redis), Postgres, the trainers."""

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
