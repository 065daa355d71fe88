"""SteerLM's rows (Dong et al. 2023): prompts that carry attribute values, for attribute-conditioned SFT
(sft.attributes) and for steering a conditioned model at use (eval.attributes).

    conditioned()   sft rows whose prompts carry their own values, rows lacking any first labelled by the attribute
                    model sft.attributes.labeller names (its predictions rounded to whole numbers, as SteerLM does)
    steered()       prompt rows whose prompts carry the values an evaluation asks for

The values reach a prompt through the spec's template (rlplane/spec/attributes.py): {attributes} is
"name:value,..." sorted by name, {prompt} the prompt text, or a conversation's last user message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Real

import torch

from rlplane.spec.attributes import AttributeConditioning, AttributeSteering, attribute_text
from trainer_core.data import DataError
from trainer_core.data.tokenize import collate, pad_id, tokenize_rows
from trainer_core.models import ModelError, load_from_spec
from trainer_core.models.attributes import attribute_names
from trainer_core.models.from_spec import context_length
from trainer_core.reporting import Reporter


def carrying(row: dict, values: Mapping[str, float], template: str) -> dict:
    """A copy of `row` whose prompt carries `values`: its prompt text, or its conversation's last user message."""
    text = attribute_text(values)
    if isinstance(row.get("prompt"), str):
        return {**row, "prompt": template.format(attributes=text, prompt=row["prompt"])}
    key = "messages" if isinstance(row.get("messages"), list) else "prompt" if isinstance(row.get("prompt"), list) else None
    if key is None:
        raise DataError(
            "a row without a prompt (a 'text' row) cannot carry attribute values; give rows a prompt and completion, or messages"
        )
    messages = [dict(m) for m in row[key]]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        raise DataError("a conversation without a user message cannot carry attribute values; give it one")
    messages[last]["content"] = template.format(attributes=text, prompt=messages[last]["content"])
    return {**row, key: messages}


def row_named(row: dict, split: str) -> str:
    """How an error names a row: its split and the start of its prompt (the loader may have reordered the rows)."""
    prompt = row.get("prompt") if isinstance(row.get("prompt"), str) else None
    if prompt is None and isinstance(row.get("messages"), list) and row["messages"]:
        prompt = str(row["messages"][0].get("content", ""))
    shown = (prompt or str(row.get("text", "")))[:40]
    return f"a {split} row (prompt {shown!r})"


def _unlabelled(row: dict, split: str, names: Sequence[str]) -> DataError:
    missing = ", ".join(repr(n) for n in names if not _known(row, [n]))
    return DataError(
        f"{row_named(row, split)} has no number in {missing} and sft.attributes has no labeller: fill the columns, or "
        "set sft.attributes.labeller to an attribute model (a reward run with reward_model.attributes) to label the "
        "rows that lack them"
    )


def is_value(value: object) -> bool:
    """An attribute value: a number (true and false are not)."""
    return isinstance(value, Real) and not isinstance(value, bool)


def _known(row: dict, names: Sequence[str]) -> bool:
    return all(is_value(row.get(n)) for n in names)


def conditioned(
    splits: Sequence[list[dict]], options: AttributeConditioning, *, seed: int, batch_size: int, reporter: Reporter
) -> list[list[dict]]:
    """Each split's rows with their prompts carrying their values of options.names; the rows lacking any value are
    labelled by options.labeller first (every rank labels alike), and without one such a row is a DataError."""
    names = list(options.names)
    lacking = [(s, i) for s, rows in enumerate(splits) for i, row in enumerate(rows) if not _known(row, names)]
    labels: dict[tuple[int, int], dict[str, float]] = {}
    if lacking and options.labeller is None:
        split, index = lacking[0]
        raise _unlabelled(splits[split][index], "training" if split == 0 else "held-out", names)
    if lacking:
        predicted = label([splits[s][i] for s, i in lacking], options, seed=seed, batch_size=batch_size)
        labels = dict(zip(lacking, predicted, strict=True))
        reporter.log(f"attributes: the labeller gave {', '.join(names)} to {len(lacking)} rows that lacked them")
    return [
        [carrying(row, labels.get((s, i)) or {n: float(row[n]) for n in names}, options.template) for i, row in enumerate(rows)]
        for s, rows in enumerate(splits)
    ]


@torch.no_grad()
def label(rows: list[dict], options: AttributeConditioning, *, seed: int, batch_size: int) -> list[dict[str, float]]:
    """The labeller's values of options.names for each row (prompt + completion as the attribute model was trained
    on them), rounded to whole numbers. On the CPU of this process: it is small beside the model being trained."""
    assert options.labeller is not None
    model, tokenizer = load_from_spec(options.labeller, "score", seed=seed)
    predicts = attribute_names(model)
    unknown = [n for n in options.names if n not in predicts]
    if unknown:
        has = ", ".join(predicts) if predicts else "no attributes (a pairwise reward model)"
        raise ModelError(
            f"sft.attributes.labeller {options.labeller.path} predicts {has}, not {', '.join(unknown)}; label with an "
            "attribute model trained on these names (reward_model.attributes)"
        )
    model.eval()
    examples = tokenize_rows(rows, tokenizer, context_length(options.labeller, model))
    out: list[dict[str, float]] = []
    for start in range(0, len(examples), batch_size):
        batch = collate(examples[start : start + batch_size], pad_id(tokenizer))
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
        out += [{n: float(round(float(row[predicts.index(n)]))) for n in options.names} for row in logits]
    return out


def steered(rows: list[dict], steering: AttributeSteering | None) -> list[dict]:
    """Prompt rows asking for steering.values (the rows as they are without steering)."""
    if steering is None:
        return rows
    return [carrying(row, steering.values, steering.template) for row in rows]
