"""How a trainer (our recipes, or a script through the SDK) reports: metrics, logs, samples, checkpoints and status,
through one `Reporter`.

    reporter = make_reporter(run_dir, rank=backend.rank, control_plane=ControlPlaneSink(url, token, run_id, attempt))
    reporter.metrics(step, {"train/loss": loss, "train/lr": lr})
    reporter.close()  # flushes everything

Torch-free: the worker and tests use it without a GPU stack.
"""

from pathlib import Path

from rlplane.layout import attempt_of_this_process
from rlplane.reporting.events import Batch, CheckpointEvent, Sample
from rlplane.reporting.http import ControlPlaneSink
from rlplane.reporting.reporter import AsyncReporter, NullReporter, Reporter, Sink
from rlplane.reporting.sinks import JsonlSink, StdoutSink, WandbSink

__all__ = [
    "AsyncReporter",
    "Batch",
    "CheckpointEvent",
    "ControlPlaneSink",
    "JsonlSink",
    "NullReporter",
    "Reporter",
    "Sample",
    "Sink",
    "StdoutSink",
    "WandbSink",
    "make_reporter",
]


def make_reporter(
    out_dir: Path | None, *, rank: int, stdout: bool = True, control_plane: ControlPlaneSink | None = None
) -> Reporter:
    """Rank zero reports to the run directory, stdout and the control plane; other ranks report nothing."""
    if rank != 0:
        return NullReporter()
    sinks: list[Sink] = []
    if out_dir is not None:
        # a worker's trainer: it writes only while its attempt owns out_dir
        sinks.append(JsonlSink(out_dir, attempt=attempt_of_this_process()))
    if stdout:
        sinks.append(StdoutSink())
    if control_plane is not None:
        sinks.append(control_plane)
    return AsyncReporter(sinks)
