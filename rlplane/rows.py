"""The rows a run reports: metric points, log lines and samples, as the API takes them (`POST /runs/{id}/reports`,
or one kind at a time) and validates them. The trainer's sinks, the SDK and the worker's forwarder write exactly
these (rlplane.reporting.events' records; tests/test_reporting.py holds every record the reporter writes to them),
so the limits live here, once: what a row may hold, and how text and non-finite floats travel."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from rlplane.floats import AnyFloat, MaybeFloat
from rlplane.limits import KEY_PATTERN, MAX_LOG_CHARS, MAX_ROWS
from rlplane.wire import INT32_MAX, Step

MAX_TEXT_CHARS = 200_000  # a sample's prompt, response, reference or turn
# The metric whose last value in an attempt is the input tokens that attempt trained on (its trainer counts from 0,
# a resume too): the worker sends it with the attempt's end, and usage adds it up (api/usage).
ATTEMPT_TOKENS = "perf/attempt_tokens"


def without_nul(text: str) -> str:
    """Postgres text and JSONB cannot hold NUL; store U+FFFD (a decoder's mark for a bad byte) on every backend."""
    return text.replace("\x00", "\ufffd")


StoredText = Annotated[str, AfterValidator(without_nul)]


class MetricRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(pattern=KEY_PATTERN, description="Namespaced key, e.g. train/loss or ppo/kl")
    step: Step = Field(description="Optimizer step; (run, key, step) is the idempotency key")
    value: AnyFloat = Field(description="NaN and +-Infinity are stored as such")
    time: float | None = Field(default=None, ge=0, le=1e11, description="Unix time; default: when received")


class LogRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attempt: int = Field(default=0, ge=0, le=INT32_MAX, description="Attempt number (0: outside any lease)")
    rank: int = Field(default=0, ge=0, le=100_000)
    seq: int = Field(ge=0, le=INT32_MAX, description="Per (attempt, rank) sequence number; makes re-sent lines harmless")
    text: StoredText = Field(max_length=MAX_LOG_CHARS)
    time: float | None = Field(default=None, ge=0, le=1e11)


SampleLabel = Literal["rollout", "generation", "chosen", "rejected"]


class Turn(BaseModel):
    """One turn of a multi-turn episode: the policy's (trained on) or the environment's (a tool's result, a user's
    turn, as the policy read it)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["policy", "environment"]
    text: StoredText = Field(max_length=MAX_TEXT_CHARS)


class SampleRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: Step
    index: int = Field(
        default=0, ge=0, le=1_000_000, description="Position within the step; (step, index) is the idempotency key"
    )
    prompt: StoredText = Field(max_length=MAX_TEXT_CHARS)
    response: StoredText = Field(max_length=MAX_TEXT_CHARS)
    reward: MaybeFloat = None
    kl: MaybeFloat = None
    scores: dict[StoredText, AnyFloat] = Field(
        default_factory=dict,
        max_length=64,
        description="Any extra per-sample scores: reward components by name, advantage, length (tokens), ...",
    )
    label: SampleLabel | None = Field(
        default=None,
        description="What the response is: rollout (RL training, the default), generation (at an evaluation), "
        "chosen / rejected (the two sides of a preference pair)",
    )
    reference: StoredText | None = Field(
        default=None, max_length=MAX_TEXT_CHARS, description="The dataset's own answer to the prompt"
    )
    turns: list[Turn] | None = Field(
        default=None,
        max_length=512,
        description="A multi-turn episode's response turn by turn, in order (the response is the whole episode's text)",
    )


class Report(BaseModel):
    """One `reports` request: rows of each kind, within MAX_ROWS."""

    model_config = ConfigDict(extra="forbid")
    metrics: list[MetricRow] = Field(default_factory=list, max_length=MAX_ROWS["metrics"])
    samples: list[SampleRow] = Field(default_factory=list, max_length=MAX_ROWS["samples"])
    logs: list[LogRow] = Field(default_factory=list, max_length=MAX_ROWS["logs"])


def row_problem(model: type[BaseModel], data: object) -> str | None:
    """Why `data` is not a `model` row, in one line; None where it is one, or differs from one only by fields this
    version does not know (a newer trainer's or SDK's: a newer API takes them, an older one has them dropped by the
    sender, rlplane.reports)."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            if error["type"] != "extra_forbidden":
                where = ".".join(str(part) for part in error["loc"])
                return f"{where}: {error['msg']}" if where else error["msg"]
    return None
