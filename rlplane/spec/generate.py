"""The generate algorithm's options: a run that writes a dataset instead of a model (Constitutional AI's data, Bai et
al. 2022), which a later run or pipeline stage reads with `data.source: run:<id>` (or `stage:<name>`).

    critique_revise   sft rows: each prompt's answer critiqued and revised by the model against principles drawn
                      from the constitution (the supervised stage of CAI)
    ai_feedback       preference rows: two answers per prompt, the better by a feedback model's choice between them
                      against a drawn principle (RL from AI feedback: a reward model learns from them)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator

from rlplane.spec.attributes import AttributeSteering
from rlplane.spec.base import StrictModel, template_checker
from rlplane.spec.generation import GenSpec
from rlplane.spec.sections import ModelSpec

GENERATE_KINDS = ("critique_revise", "ai_feedback")
GENERATED_FILE = "data.jsonl"  # in the run's final/ directory: what data.source run:<id> reads
# What each kind writes: the kind of rows (rlplane/dataset_rows.py) a run reading it must read.
GENERATED_ROWS = {"critique_revise": "sft", "ai_feedback": "preference"}

CRITIQUE_TEMPLATE = "{prompt}{response}\n\nCritique request: {principle}\nCritique:"
REVISION_TEMPLATE = (
    "{prompt}{response}\n\nCritique request: {principle}\nCritique:{critique}\n\n"
    "Revision request: Rewrite the response to address the critique.\nRevision:"
)
COMPARISON_TEMPLATE = "{prompt}\n{principle}\n(A){first}\n(B){second}\nThe better response is ("

Principle = Annotated[str, StringConstraints(min_length=1, max_length=2000)]


class GenerateOptions(StrictModel):
    """Write a dataset with the model: Constitutional AI's critiques and revisions, or its AI feedback."""

    kind: Literal["critique_revise", "ai_feedback"] = Field(
        description="critique_revise: sft rows, each prompt's answer critiqued and revised against the principles "
        "(CAI's supervised stage); ai_feedback: preference rows, two answers per prompt ranked by feedback_model "
        "against a principle (CAI's RL from AI feedback: train a reward model on them).",
    )
    principles: list[Principle] = Field(
        min_length=1,
        max_length=64,
        description="The constitution: one is drawn for each prompt (and each revision), seeded by train.seed. "
        "critique_revise puts it in the critique request; ai_feedback asks which answer better follows it.",
    )
    revisions: int = Field(
        1, ge=1, le=8, description="critique_revise: rounds of critique and revision per answer (the paper used up to 4)."
    )
    feedback_model: ModelSpec | None = Field(
        None,
        description="ai_feedback: the model that chooses between two answers (its next-token probabilities of A and "
        "B, averaged over both orders); null: the run's model.",
    )
    critique_template: str = Field(
        CRITIQUE_TEMPLATE,
        max_length=4000,
        description="What the model continues with a critique: {prompt}, {response} and {principle}.",
    )
    revision_template: str = Field(
        REVISION_TEMPLATE,
        max_length=4000,
        description="What the model continues with a revision: {prompt}, {response}, {principle} and {critique}.",
    )
    comparison_template: str = Field(
        COMPARISON_TEMPLATE,
        max_length=4000,
        description="ai_feedback: what the feedback model continues with A or B: {prompt}, {principle}, {first} and {second}.",
    )
    gen: GenSpec = Field(default_factory=GenSpec, description="Sampling of answers, critiques and revisions.")
    attributes: AttributeSteering | None = Field(
        None,
        description="Ask a SteerLM-conditioned model (sft.attributes) for these attribute values when it answers: each "
        "prompt it answers carries them (the rows keep the prompt as it was); null: the prompts as they are.",
    )
    max_prompts: int | None = Field(None, ge=1, description="Generate for the first N prompts only; null: all of them.")
    samples_to_log: int = Field(
        4, ge=0, description="Rows shown as the run's samples (with the first answer, critiques and revision)."
    )

    _critique = field_validator("critique_template")(template_checker("prompt", "response", "principle"))
    _revision = field_validator("revision_template")(template_checker("prompt", "response", "principle", "critique"))
    _comparison = field_validator("comparison_template")(template_checker("prompt", "principle", "first", "second"))

    @property
    def rows(self) -> str:
        """The kind of rows this run writes."""
        return GENERATED_ROWS[self.kind]
