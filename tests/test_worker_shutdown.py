"""A worker that is shut down (SIGTERM: docker stop, a pod's termination) hands its run back: the
trainer checkpoints after its current step and exits, the attempt ends "handed back", the run is
requeued at once (not after the lost-worker limit) and another worker resumes it from that
checkpoint, so no step is trained twice; the attempt does not use up max_attempts.
Real processes: an `rlplane api`, two `rlplane worker`s (Celery on Redis), Postgres, the trainers."""

from __future__ import annotations

import re
import signal
import time

from tests.harness.worker_stack import LONG, Stack, assert_metrics_once


def test_sigterm_hands_the_run_back_and_another_worker_resumes_it(stack: Stack) -> None:  # noqa: F811  (the fixture)
    first = stack.start_worker("w1")
    # One attempt allowed: a handed-back attempt must not count, or the run would fail instead.
    run_id = stack.submit({**LONG, "resources": {"queue": "cpu", "max_attempts": 1}})
    stack.wait_step(run_id, 250)
    first.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert first.wait(60) == 0, "the worker did not exit cleanly after SIGTERM"
    run = stack.run(run_id)
    assert run["status"] == "queued", run["status_reason"]  # requeued before the worker exited
    assert time.monotonic() - stopped < 30
    [attempt] = run["attempts"]
    assert attempt["handed_back"] and attempt["ended_at"] is not None
    assert attempt["end_reason"].startswith("handed back: worker w1 received SIGTERM"), attempt["end_reason"]
    checkpointed = re.search(r"checkpointed at step (\d+), where the next attempt resumes", attempt["end_reason"])
    assert checkpointed, attempt["end_reason"]
    handed_back_at = int(checkpointed.group(1))
    # the step the trainer had reached: no later than the checkpoint, none of its steps lost
    assert handed_back_at >= max(250, attempt["last_step"])

    stack.start_worker("w2")
    run = stack.wait_status(run_id, {"succeeded", "failed"})
    assert run["status"] == "succeeded", run["status_reason"]
    first_attempt, second = run["attempts"]
    assert (first_attempt["worker"], second["worker"]) == ("w1", "w2")
    assert not second["handed_back"]
    logs = [line["text"] for line in stack.http.get(f"/runs/{run_id}/logs", params={"limit": 1000}).json()["data"]]
    # LONG checkpoints every 100 steps; the second attempt starts where the first stopped
    assert any(f"step-{handed_back_at:06d} at step {handed_back_at}" in text for text in logs), [
        text for text in logs if "resumed" in text
    ]
    assert_metrics_once(stack, run_id)
