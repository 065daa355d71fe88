"""SteerLM's attributes in the spec (Dong et al. 2023, "SteerLM: Attribute Conditioned SFT as an (User-Steerable)
Alternative to RLHF"): an attribute model's names (reward_model.attributes), the conditioning of SFT rows on their
values (sft.attributes) and the values an evaluation asks for (eval.attributes).

A prompt carries its attributes through a template: {attributes} becomes "name:value,..." (sorted by name, whole
numbers without a decimal point) and {prompt} the prompt, or a conversation's last user message. Training and use
share the default template, so an evaluation of a conditioned model only names the values it wants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field, StringConstraints, field_validator

from rlplane.spec.base import StrictModel, template_checker
from rlplane.spec.sections import ModelSpec

AttributeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}$")]
ATTRIBUTE_TEMPLATE = "{attributes}\n{prompt}"
TEMPLATE_FIELDS = ("attributes", "prompt")


def attribute_text(values: Mapping[str, float]) -> str:
    """'correctness:4,verbosity:2': the values sorted by name, whole numbers as integers."""
    return ",".join(f"{name}:{_number(values[name])}" for name in sorted(values))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{float(value):g}"


TEMPLATE = Field(
    ATTRIBUTE_TEMPLATE,
    min_length=1,
    max_length=1000,
    description="How a prompt carries its attributes: {attributes} becomes 'name:value,...' (sorted by name), {prompt} "
    "the prompt (a conversation's last user message). Training and use must share it; the default is the same "
    "everywhere.",
)


class AttributeConditioning(StrictModel):
    """SteerLM's attribute-conditioned SFT: each row's prompt carries its attribute values, so the model learns to
    answer as asked."""

    names: list[AttributeName] = Field(
        min_length=1,
        max_length=16,
        description="The attributes each prompt carries: columns of the rows, numbers (HelpSteer's helpfulness, "
        "correctness, coherence, complexity, verbosity).",
    )
    template: str = TEMPLATE
    labeller: ModelSpec | None = Field(
        None,
        description="An attribute model (a reward run with reward_model.attributes covering these names, e.g. "
        "run:<id> or stage:<name>) that labels the rows lacking any of them, its predictions rounded to whole numbers "
        "as SteerLM does; null: every row must carry them.",
    )

    _template = field_validator("template")(template_checker(*TEMPLATE_FIELDS, once=True))


class AttributeSteering(StrictModel):
    """The attribute values an evaluation asks a conditioned model for (SteerLM's steering at use)."""

    values: dict[AttributeName, float] = Field(
        min_length=1, max_length=16, description="The wanted value of each attribute, e.g. {correctness: 4, verbosity: 1}."
    )
    template: str = TEMPLATE

    _template = field_validator("template")(template_checker(*TEMPLATE_FIELDS, once=True))
