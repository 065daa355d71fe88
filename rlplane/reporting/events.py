"""What a trainer reports: metric points, log lines, samples, checkpoints and status changes."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rlplane.floats import encode as json_float  # JSON has no NaN or infinity: they travel as strings
from rlplane.limits import MAX_LOG_CHARS
from rlplane.status import TrainerStatus


class MetricPoint(NamedTuple):  # a tuple, not a dataclass: millions are made on the training hot path
    key: str
    step: int
    value: float
    time: float


class LogLine(NamedTuple):
    rank: int
    seq: int  # per rank, from 0: re-sending a line is harmless
    text: str
    time: float


@dataclass(frozen=True)
class Sample:
    """One response to one prompt. The samples of a step that share a prompt are its group (GRPO's G responses,
    a preference pair). `scores`: reward components by name, advantage, length (tokens), ...; `label`: rollout
    (None), generation (at an evaluation), chosen or rejected; `reference`: the dataset's own answer; `turns`: a
    multi-turn episode's response turn by turn, (role, text) with role policy or environment, in order."""

    prompt: str
    response: str
    reward: float | None = None
    kl: float | None = None
    scores: Mapping[str, float] = field(default_factory=dict)
    label: str | None = None
    reference: str | None = None
    turns: tuple[tuple[str, str], ...] | None = None


class StepSample(NamedTuple):
    step: int
    index: int  # position within the step; (step, index) is the API's idempotency key
    sample: Sample
    time: float


@dataclass(frozen=True)
class CheckpointEvent:
    step: int
    path: str  # relative to the artifact root
    size: int
    sha256: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StatusEvent:
    status: TrainerStatus
    reason: str
    last_step: int | None
    time: float


@dataclass
class Batch:
    """Everything reported since the last drain, in the order it was reported (per kind)."""

    metrics: list[MetricPoint] = field(default_factory=list)
    logs: list[LogLine] = field(default_factory=list)
    samples: list[StepSample] = field(default_factory=list)
    checkpoints: list[CheckpointEvent] = field(default_factory=list)
    statuses: list[StatusEvent] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.metrics) + len(self.logs) + len(self.samples) + len(self.checkpoints) + len(self.statuses)

    def metrics_by_step(self) -> dict[int, dict[str, float]]:
        steps: dict[int, dict[str, float]] = {}
        for point in self.metrics:
            steps.setdefault(point.step, {})[point.key] = point.value
        return steps


# The records below are the JSON of the contract's rows (rlplane/rows.py: MetricRow, LogRow, SampleRow), built by
# hand for speed on the reporting path; tests/test_reporting.py validates what the sinks write against the rows.


def metric_record(point: MetricPoint) -> dict[str, Any]:
    return {"key": point.key, "step": point.step, "value": json_float(point.value), "time": point.time}


def log_record(line: LogLine, attempt: int | None = None) -> dict[str, Any]:
    """A log line; sent to the API (with its attempt) cut to MAX_LOG_CHARS, the run directory's file keeps it whole."""
    if attempt is None:
        return {"rank": line.rank, "seq": line.seq, "text": line.text, "time": line.time}
    return {"attempt": attempt, "rank": line.rank, "seq": line.seq, "text": line.text[:MAX_LOG_CHARS], "time": line.time}


def sample_record(item: StepSample) -> dict[str, Any]:
    sample = item.sample
    return {
        "step": item.step,
        "index": item.index,
        "prompt": sample.prompt,
        "response": sample.response,
        "reward": json_float(sample.reward),
        "kl": json_float(sample.kl),
        "scores": {name: json_float(value) for name, value in sample.scores.items()},
        **({"label": sample.label} if sample.label is not None else {}),
        **({"reference": sample.reference} if sample.reference is not None else {}),
        **({"turns": [{"role": role, "text": text} for role, text in sample.turns]} if sample.turns is not None else {}),
    }


def checkpoint_record(event: CheckpointEvent) -> dict[str, Any]:
    return {"step": event.step, "path": event.path, "size": event.size, "sha256": event.sha256, "metadata": dict(event.metadata)}
