"""SteerLM's attribute model: a sequence-classification model with one regression output per named attribute.

The names travel in the model's config (`rlplane_attributes`, saved with it in config.json), so a labeller loaded
from an export knows which output is which, and loading it as a score model keeps one output per name
(builtin.score_config).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from trainer_core.models.errors import ModelError


def attribute_names(model: PreTrainedModel) -> list[str]:
    """The attributes a score model predicts, in output order; [] for a one-output reward model."""
    return list(getattr(model.config, "rlplane_attributes", None) or [])


def with_attribute_head(model: PreTrainedModel, names: list[str], seed: int) -> PreTrainedModel:
    """`model` (a score model) predicting `names`: its head kept where it already predicts exactly those, else a new
    linear head of len(names) outputs drawn from `seed` (the trunk keeps its weights)."""
    if attribute_names(model) == names:
        return model
    head = getattr(model, "score", None)
    if not isinstance(head, nn.Linear):
        raise ModelError(
            f"{type(model).__name__} has no linear `score` head to give one output per attribute; use a model whose "
            "sequence-classification head is one (GPT-2, Llama, Qwen, Mistral and most decoder models)"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = nn.Linear(head.in_features, len(names), bias=head.bias is not None)
    model.score = new.to(device=head.weight.device, dtype=head.weight.dtype)
    model.config.num_labels = len(names)
    model.config.rlplane_attributes = list(names)
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {name: i for i, name in enumerate(names)}
    return model
