from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from api.floats import AnyFloat, MaybeFloat


def without_nul(text: str) -> str:
    """Postgres text and JSONB cannot hold NUL; store U+FFFD (a decoder's mark for a bad byte) on every backend alike."""
    return text.replace("\x00", "\ufffd")


Text = Annotated[str, AfterValidator(without_nul)]


class SampleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int = Field(ge=0, le=2**62)
    index: int = Field(default=0, ge=0, le=1_000_000, description="Position within the step; (step, index) is the idempotency key")
    prompt: Text = Field(max_length=200_000)
    response: Text = Field(max_length=200_000)
    reward: MaybeFloat = None
    kl: MaybeFloat = None
    scores: dict[Text, AnyFloat] = Field(default_factory=dict, max_length=64, description="Any extra per-sample scores")


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
    time: float


class SampleIngestResult(BaseModel):
    accepted: int
    duplicates: int


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
