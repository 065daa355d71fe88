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
