"""A torch optimizer over a GPTModel shard, seen through the Hugging Face model's parameters.

The recipe builds its optimizer over the HF model; the megatron backend trains the GPTModel shards.
Everything per parameter therefore goes through the weight conversion (convert.py + sharding.py),
which only moves elements (split, fuse, transpose, pad), so it maps any tensor shaped like the
weights exactly:

- which optimizer group each shard belongs to: a probe holding each HF parameter's group number is
  converted like the weights (`megatron_groups`);
- Adam's moments (exp_avg, exp_avg_sq, ...) are sharded like their weights: gathered over TP and
  converted back they are the HF model's (`gather_hf_state`), and an HF-keyed state converts to any
  TP size's shards (`scatter_hf_state`). The per-parameter `step` travels as a probe filled with it.

The gathered state is torch's own `optimizer.state_dict()` format over the HF model's parameters
(indices in the recipe's group order), the format the torch backend writes: a checkpoint moves
between the torch and megatron backends and between TP sizes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainer_core.backends.base import BackendError
from trainer_core.backends.megatron.layout import Layout, to_hf, to_shard
from trainer_core.models.megatron.convert import StateDict

__all__ = ["Layout", "gather_hf_state", "megatron_groups", "scatter_hf_state", "to_hf", "to_shard"]

STEP = "step"
# Weights whose rows past the vocabulary are padding (zeros in every converted probe).
_VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight")


def megatron_groups(
    hf_model: nn.Module,
    optimizer: torch.optim.Optimizer,
    local: dict[str, nn.Parameter],
    layout: Layout,
    tp_rank: int,
    tp_size: int,
) -> tuple[list[list[str]], list[list[nn.Parameter]]]:
    """(the HF parameter names of each optimizer group, the local parameters that take their place).

    `local`: this rank's parameters by `to_shard`'s names (GPTModel shards and kept heads). A GPTModel
    parameter fuses several HF ones (q, k and v); they must share a group. Local parameters of no
    group (frozen in the HF model) are frozen too."""
    names = {id(p): name for name, p in hf_model.named_parameters()}
    hf_groups = []
    for index, group in enumerate(optimizer.param_groups):
        missing = [tuple(p.shape) for p in group["params"] if id(p) not in names]
        if missing:
            raise BackendError(f"optimizer group {index} holds parameters of shapes {missing[:3]} that are not the model's.")
        hf_groups.append([names[id(p)] for p in group["params"]])
    probe = {name: torch.zeros(p.shape, dtype=torch.int16) for name, p in hf_model.named_parameters()}
    for index, group_names in enumerate(hf_groups):
        for name in group_names:
            probe[name].fill_(index + 1)  # 0: in no group
    converted = to_shard(probe, layout, tp_rank, tp_size)
    groups: list[list[nn.Parameter]] = [[] for _ in hf_groups]
    for name, param in local.items():
        values = set(converted[name].unique().tolist())
        if name in _VOCAB:
            values = values - {0} or {0}  # the padding rows are zeros
        if len(values) != 1:
            raise BackendError(
                f"megatron weight {name} fuses Hugging Face parameters of different optimizer groups or frozen and "
                f"trainable ones ({sorted(values)}, 0: frozen); give them the same weight decay, or freeze all or none."
            )
        group = values.pop()
        if group == 0:
            param.requires_grad_(False)
        else:
            groups[group - 1].append(param)
    return hf_groups, groups


def _moment_keys(optimizer: torch.optim.Optimizer) -> list[str]:
    """The per-element state entries (shaped like the parameter) this optimizer keeps."""
    keys: set[str] = set()
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if key != STEP and torch.is_tensor(value) and value.shape == param.shape:
                    keys.add(key)
    return sorted(keys)


def gather_hf_state(
    local: dict[str, nn.Parameter], optimizer: torch.optim.Optimizer, hf_groups: list[list[str]], layout: Layout
) -> dict[str, Any]:
    """The optimizer's state as torch's state_dict of an optimizer over the HF model (every TP rank calls it)."""
    named = local
    keys = _moment_keys(optimizer)
    # An agreed key list on every rank: each gather below is a collective.
    fields: dict[str, StateDict] = {key: {} for key in [STEP, *keys]}
    for name, param in named.items():
        state = optimizer.state.get(param, {})
        step = float(state[STEP]) if STEP in state else 0.0  # steps start at 1: 0 marks "no state yet"
        fields[STEP][name] = torch.full_like(param, step, dtype=torch.float32, device="cpu")
        for key in keys:
            value = state.get(key)
            fields[key][name] = (value if value is not None else torch.zeros_like(param)).detach().cpu()
    whole = {key: to_hf(tensors, layout) for key, tensors in fields.items()}
    state_out: dict[int, dict[str, torch.Tensor]] = {}
    groups_out = []
    index = 0
    for group, group_names in zip(optimizer.param_groups, hf_groups, strict=True):
        ids = []
        for name in group_names:
            step = _one_value(whole[STEP][name], name)
            if step > 0:
                state_out[index] = {STEP: torch.tensor(step, dtype=torch.float32)} | {k: whole[k][name] for k in keys}
            ids.append(index)
            index += 1
        groups_out.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
    return {"state": state_out, "param_groups": groups_out}


def scatter_hf_state(
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    local: dict[str, nn.Parameter],
    hf_model: nn.Module,
    hf_groups: list[list[str]],
    layout: Layout,
    tp_rank: int,
    tp_size: int,
) -> dict[str, Any]:
    """An HF-keyed optimizer state (torch's format, keyed by index or by parameter name) -> the state_dict of
    `optimizer` over this rank's GPTModel shards, for `optimizer.load_state_dict`."""
    if state.get("format") == "by-name" or "state" not in state:
        raise BackendError(
            "this checkpoint's optimizer state is in DeepSpeed's by-name format; resume it with backend.kind deepspeed."
        )
    order = [name for names in hf_groups for name in names]
    by_name: dict[str, dict[str, Any]] = {}
    for key, value in state["state"].items():
        name = key if isinstance(key, str) and not key.isdigit() else order[int(key)]
        by_name[name] = value
    keys = sorted({k for value in by_name.values() for k in value if k != STEP})
    shapes = {name: p.shape for name, p in hf_model.named_parameters()}
    fields: dict[str, StateDict] = {}
    for key in [STEP, *keys]:
        hf: StateDict = {}
        for name, shape in shapes.items():
            value = by_name.get(name, {}).get(key)
            if key == STEP:
                hf[name] = torch.full(shape, float(value) if value is not None else 0.0, dtype=torch.float32)
            else:
                hf[name] = value.detach().cpu() if value is not None else torch.zeros(shape)
        fields[key] = to_shard(hf, layout, tp_rank, tp_size)
    megatron_state: dict[int, dict[str, torch.Tensor]] = {}
    groups_out = []
    index = 0
    saved_groups = state["param_groups"]
    if len(saved_groups) != len(optimizer.param_groups):
        raise BackendError(
            f"the checkpoint's optimizer has {len(saved_groups)} parameter groups, this run's {len(optimizer.param_groups)}; "
            "resume with the spec that wrote it."
        )
    names = {id(p): name for name, p in local.items()}
    for group, saved in zip(optimizer.param_groups, saved_groups, strict=True):
        ids = []
        for param in group["params"]:
            name = names[id(param)]
            step = _one_value(fields[STEP][name], name)
            if step > 0:
                megatron_state[index] = {STEP: torch.tensor(step, dtype=torch.float32)} | {k: fields[k][name] for k in keys}
            ids.append(index)
            index += 1
        groups_out.append({**{k: v for k, v in saved.items() if k != "params"}, "params": ids})
    return {"state": megatron_state, "param_groups": groups_out}


def _one_value(probe: torch.Tensor, name: str) -> float:
    """The step count a probe holds (0: no state); a vocabulary's padding rows read 0 and are skipped."""
    if name in _VOCAB:
        probe = probe[probe != 0]
        if probe.numel() == 0:
            return 0.0
    low, high = float(probe.min()), float(probe.max())
    if low != high:
        raise BackendError(f"optimizer step counts differ within {name} ({low} vs {high}); the state is inconsistent.")
    return low
