from typing import Literal

from pydantic import BaseModel, Field

from rlplane.floats import AnyFloat, MaybeFloat
from rlplane.rows import SampleLabel, Turn


class SampleOut(BaseModel):
    id: int
    step: int
    index: int
    prompt: str
    prompt_hash: str = Field(description="Stable id of the prompt: filter by it to see one prompt across steps")
    response: str
    reward: MaybeFloat
    kl: MaybeFloat
    scores: dict[str, AnyFloat]
    label: SampleLabel | None
    reference: str | None
    turns: list[Turn] | None
    time: float


class SamplePage(BaseModel):
    data: list[SampleOut]
    count: int


class PromptSummary(BaseModel):
    prompt_hash: str
    prompt: str
    samples: int
    first_step: int
    last_step: int


class PromptList(BaseModel):
    data: list[PromptSummary]
    count: int


SampleSort = Literal["step", "-step", "reward", "-reward"]


SampleAt = Literal["latest", "step", "best", "all"]


class RunSamplesAt(BaseModel):
    """One compared run: which of its sample steps the view shows, and every step it has samples at."""

    run_id: int
    name: str
    algorithm: str
    step: int | None = Field(description="The sample step shown (null: none fits, see `why`; at=all: every step)")
    why: str | None = Field(None, description="Why no step is shown for this run")
    steps: list[int] = Field(description="Every step with samples, to pick another")


class PromptAcrossRuns(BaseModel):
    prompt_hash: str
    prompt: str
    reference: str | None
    samples: dict[int, list[SampleOut]] = Field(description="By run id: the prompt's samples at the run's shown step(s)")


class SampleComparison(BaseModel):
    runs: list[RunSamplesAt]
    prompts: list[PromptAcrossRuns] = Field(description="Prompts that most runs have first, then by prompt")
    count: int = Field(description="Prompts matching, before `limit`")
