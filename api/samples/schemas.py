from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from api.floats import AnyFloat, MaybeFloat
from api.values import Step, StoredText

SampleLabel = Literal["rollout", "generation", "chosen", "rejected"]


class Turn(BaseModel):
    """One turn of a multi-turn episode: the policy's (trained on) or the environment's (a tool's result, a user's
    turn, as the policy read it)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["policy", "environment"]
    text: StoredText = Field(max_length=200_000)


class SampleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: Step
    index: int = Field(
        default=0, ge=0, le=1_000_000, description="Position within the step; (step, index) is the idempotency key"
    )
    prompt: StoredText = Field(max_length=200_000)
    response: StoredText = Field(max_length=200_000)
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
    reference: StoredText | None = Field(default=None, max_length=200_000, description="The dataset's own answer to the prompt")
    turns: list[Turn] | None = Field(
        default=None,
        max_length=512,
        description="A multi-turn episode's response turn by turn, in order (the response is the whole episode's text)",
    )


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
