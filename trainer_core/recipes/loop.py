"""The loop around every recipe's step: judge the step (train.on_nonfinite), report the log window, evaluate,
checkpoint when due or when the worker asks for the run back, stop when another attempt owns the run directory.
The algorithm stays in the recipe's step function; this is the platform around it (torchtune's recipes keep the
same split).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlplane.rows import ATTEMPT_TOKENS
from trainer_core.checkpoint import fence
from trainer_core.recipes import checkpointing, common, run_dir_signals
from trainer_core.recipes.checkpointing import CheckpointState
from trainer_core.recipes.divergence import Diverged, NonFiniteGuard


@dataclass
class StepResult:
    """One optimizer step's reported values (already reduced over ranks), and the input tokens it trained on over
    the data ranks (the RL recipes: the update's, every epoch; None: not counted). perf/tokens_per_s and perf/mfu
    divide them by the whole step's wall time: an RL step's generation included."""

    values: dict[str, float]
    tokens: int | None = None


class LogWindow:
    """The steps since the last report: their values averaged over the steps whose update counted (a skipped
    step's NaN would hide the rest), train/lr as at the reported step, and how many updates were skipped."""

    def __init__(self, count_skips: bool, gpus: common.Throughput | None = None) -> None:
        self.count_skips = count_skips
        self.timer = common.StepTimer(gpus)
        self.attempt_tokens = 0  # since this process started: the worker reports its last value as the attempt's
        self._counted: list[Mapping[str, float]] = []
        self._skipped: list[Mapping[str, float]] = []
        self._last: Mapping[str, float] = {}
        self._timed = False

    def add(self, result: StepResult, values: Mapping[str, float], counted: bool) -> None:
        (self._counted if counted else self._skipped).append(values)
        self._last = values
        if result.tokens is not None:
            self.timer.add(result.tokens)
            self.attempt_tokens += result.tokens
            self._timed = True

    def report(self) -> dict[str, float]:
        rows = self._counted or self._skipped  # a window of skipped steps only shows what they were
        means = {key: sum(row[key] for row in rows) / len(rows) for key in rows[0]}
        if "train/lr" in self._last:
            means["train/lr"] = self._last["train/lr"]
        if self.count_skips:
            means["train/skipped_steps"] = float(len(self._skipped))
        if self._timed:
            means |= self.timer.report() | {ATTEMPT_TOKENS: float(self.attempt_tokens)}
        self._counted, self._skipped, self._timed = [], [], False
        return means


def run_loop(
    run: common.Run,
    stop_at: int | None,
    *,
    step: Callable[[Any], StepResult],
    evaluate: Callable[[Any], Mapping[str, float] | None],
    checkpoint_state: Callable[[Any], CheckpointState] = checkpointing.run_state,
    first_eval: Callable[[Any], Mapping[str, float] | None] | None = None,
) -> None:
    """Train `run` to train.steps, or stop after step `stop_at`, checkpointed, as a preempted run would.
    `first_eval` (default `evaluate`) reports step 0 of a fresh run; `evaluate` runs every train.eval_every
    steps and at the end; `checkpoint_state` says what a checkpoint of the run holds (default: the run's
    model, optimizer, schedule and data position)."""
    t, reporter = run.spec.train, run.reporter
    last = t.steps if stop_at is None else min(stop_at, t.steps)
    if run.step == 0 and (values := (first_eval or evaluate)(run)):
        reporter.metrics(0, values)
    guard = NonFiniteGuard(t, reporter, loss_scaled=run.spec.backend.precision == "fp16")
    window = LogWindow(count_skips=t.on_nonfinite == "skip", gpus=common.throughput(run))
    working_on = run.step + 1
    try:
        while run.step < last:
            working_on = run.step + 1
            lr = run.scheduler.get_last_lr()[0]
            result = step(run)
            signals = run_dir_signals.read(run.out_dir, run.backend)  # a hand-back, or a fence
            if signals.fenced:  # the new attempt resumes from a checkpoint: this step is not reported
                doing = f"stopped after step {run.step} without reporting it"
                raise fence.Fenced(fence.ended(run.out_dir, doing, fence.owner_if_fenced(run.out_dir)))
            values = {**result.values, "train/lr": lr}
            window.add(result, values, guard.check(run.step, values))
            done = run.step
            if done % t.log_every == 0 or done == last:
                reporter.metrics(done, window.report())
            if common.is_due(done, t.eval_every, t.steps) and (values := evaluate(run)):
                reporter.metrics(done, values)
            if signals.hand_back or common.is_due(done, t.checkpoint_every, last):  # hand-back: the worker shuts down
                checkpointing.checkpoint_run(run, checkpoint_state(run))
            if signals.hand_back:
                run_dir_signals.handed_back = run.step < last
                break
    except Diverged as exc:
        if " at step " in str(exc):
            raise
        raise Diverged(f"{exc} at step {working_on}") from None  # raised while sampling, which knows no step
