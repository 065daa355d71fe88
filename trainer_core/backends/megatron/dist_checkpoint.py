"""Save and resume a Megatron GPTModel and its torch Adam optimizer with megatron's dist_checkpointing.

Every rank of the run calls `save_distributed` / `load_distributed` together. The weights are
described by `model.sharded_state_dict()`, so a checkpoint written under one tensor-parallel layout
loads under another (resharding on load); the optimizer's moments are described by ShardedTensors
that mirror their parameter's (megatron's own helpers, dist_checkpointing/optimizer.py), so they
reshard with the weights. Storage is safetensors + JSON through the strategies in
dist_checkpoint_strategies.py; nothing is pickled.

On CPU the backend trains with a plain torch optimizer (megatron's DistributedOptimizer needs CUDA),
so the optimizer here is torch.optim.Adam/AdamW over the GPTModel's local parameters and any `heads`:
small parameters replicated on every rank beside it (a reward model's score layer, PPO's value head),
saved once as `heads.<name>` by the rank megatron names their main replica. As megatron's
FP32Optimizer does, the step count, shared by every parameter, goes to the common state (JSON)
rather than into a ShardedTensor, together with the param_groups' hyperparameters.

    save_distributed(directory, model, optimizer, {"step": 2, "data_position": 64})
    extra = load_distributed(directory, fresh_model, fresh_optimizer)   # -> {"step": 2, ...}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from megatron.core.dist_checkpointing import serialization
from megatron.core.dist_checkpointing.core import CheckpointingConfig, maybe_load_config, save_config
from megatron.core.dist_checkpointing.dict_utils import extract_matching_values
from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedStateDict
from megatron.core.dist_checkpointing.optimizer import get_param_id_to_sharded_param_map, optim_state_to_sharding_state
from megatron.core.dist_checkpointing.state_dict_utils import save_preprocess
from megatron.core.models.gpt import GPTModel
from megatron.core.utils import make_sharded_tensor_for_checkpoint
from torch import nn

from trainer_core.backends.megatron.cpu_shim import apply_cpu_shim
from trainer_core.backends.megatron.dist_checkpoint_files import COMMON_BACKEND, FORMAT_VERSION, SHARDED_BACKEND, check_no_pickle
from trainer_core.backends.megatron.dist_checkpoint_strategies import (
    JsonLoadCommonStrategy,
    JsonSaveCommonStrategy,
    SafetensorsLoadShardedStrategy,
    SafetensorsSaveShardedStrategy,
)
from trainer_core.checkpoint.errors import CheckpointError

COMMON_STEP = "common_step"  # megatron's FP32Optimizer keeps the shared step under this key too
HEADS = "heads."  # the sharded key prefix of replicated parameters beside the GPTModel


def save_distributed(
    directory: str | Path,
    model: GPTModel,
    optimizer: torch.optim.Optimizer,
    extra_common: dict[str, Any],
    heads: dict[str, nn.Parameter] | None = None,
) -> None:
    """Write this rank's shards of `model`, `heads` and `optimizer`, and (rank 0) `extra_common`, under `directory`.

    `extra_common` (RNG, data position, the spec's step...) is JSON plus tensors and should be the same on
    every rank: rank 0's is written, and megatron only logs a warning where another rank's differs.
    """
    apply_cpu_shim()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model_state = model_sharded_state(model, heads)
    optimizer_state = optimizer_sharded_state(model_state, optimizer, optimizer.state_dict())
    state = {"model": model_state, "optimizer": optimizer_state, "extra": extra_common}
    _save(state, directory)
    check_no_pickle(directory)


def load_distributed(
    directory: str | Path,
    model: GPTModel,
    optimizer: torch.optim.Optimizer,
    heads: dict[str, nn.Parameter] | None = None,
    holds_heads: bool = True,
) -> dict[str, Any]:
    """Fill `model`, `heads` and `optimizer` from the checkpoint in `directory`, resharded to this run's layout;
    returns the `extra_common` it was saved with. `holds_heads`: False on a pipeline stage before the last, which
    has none of the model's heads (so it does not check them)."""
    apply_cpu_shim()
    directory = Path(directory)
    config = maybe_load_config(str(directory))
    if config is None:
        raise CheckpointError(f"{directory} has no metadata.json: it is not a Megatron checkpoint, or its save did not finish.")
    # Before reading anything else: megatron's own formats hold pickles.
    SafetensorsLoadShardedStrategy().check_backend_compatibility(config.sharded_backend)
    JsonLoadCommonStrategy().check_backend_compatibility(config.common_backend)
    heads = heads or {}
    model_state = model_sharded_state(model, heads)
    if holds_heads:
        _check_same_heads(directory, heads)
    template = _loading_template(optimizer, model_state, _saved_keys(directory))
    optimizer_state = optimizer_sharded_state(model_state, optimizer, template)
    loaded = serialization.load(
        {"model": model_state, "optimizer": optimizer_state},
        str(directory),
        sharded_strategy=SafetensorsLoadShardedStrategy(),
        common_strategy=JsonLoadCommonStrategy(),
    )
    head_values = {name: loaded["model"].pop(HEADS + name) for name in heads}
    model.load_state_dict(loaded["model"])
    with torch.no_grad():
        for name, param in heads.items():
            param.copy_(head_values[name])
    optimizer.load_state_dict(_restore_step(loaded["optimizer"]))
    return loaded.get("extra", {})


def model_sharded_state(model: GPTModel, heads: dict[str, nn.Parameter] | None = None) -> ShardedStateDict:
    """The GPTModel's sharded state and each head as a ShardedTensor replicated over TP and DP (`heads.<name>`)."""
    state = model.sharded_state_dict()
    for name, param in (heads or {}).items():
        state[HEADS + name] = make_sharded_tensor_for_checkpoint(param, HEADS + name)
    return state


def optimizer_sharded_state(
    model_state: ShardedStateDict, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> dict[str, Any]:
    """`state` (the optimizer's state_dict, or a template to load into) with each per-parameter tensor
    (exp_avg, exp_avg_sq) a ShardedTensor keyed `optimizer.state.<name>.<parameter's sharded key>` and
    placed like its parameter; the shared step and the param_groups stay common state."""
    if not isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        raise CheckpointError(
            f"megatron checkpoints hold Adam/AdamW state; this run's optimizer is {type(optimizer).__name__}. "
            "Use optimizer adamw with the megatron backend."
        )
    params = _params(optimizer)
    step = _common_step(state["state"])
    by_id = get_param_id_to_sharded_param_map(model_state, params)
    if len(by_id) != len(params):
        raise CheckpointError(
            f"{len(params) - len(by_id)} of the optimizer's {len(params)} parameters are neither the GPTModel's nor a "
            "head's; build the optimizer over model.parameters() and the heads'."
        )
    optim_state_to_sharding_state(state, by_id, exclude_keys=("step",))
    if step is not None:
        state["state"][COMMON_STEP] = step
    return state


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """In the order torch numbers them in the optimizer's state_dict."""
    return [param for group in optimizer.param_groups for param in group["params"]]


def _saved_keys(directory: Path) -> set[str]:
    """The sharded key of every tensor the checkpoint holds."""
    return set(SafetensorsLoadShardedStrategy().load_tensors_metadata(directory))


def _check_same_heads(directory: Path, heads: dict[str, nn.Parameter]) -> None:
    """Heads beside the GPTModel must be the saved ones: a reward checkpoint's score head is not PPO's value head."""
    saved = {key.removeprefix(HEADS) for key in _saved_keys(directory) if key.startswith(HEADS)}
    if saved != set(heads):
        raise CheckpointError(
            f"the checkpoint in {directory} holds the heads {sorted(saved)} beside the transformer, this run's model "
            f"{sorted(heads)}; resume with the algorithm and spec that wrote it."
        )


def _loading_template(optimizer: torch.optim.Optimizer, model_state: ShardedStateDict, saved: set[str]) -> dict[str, Any]:
    """The optimizer's state_dict with zero moments to read into (a fresh optimizer has none yet) for each
    parameter that had them when saved: none before the first step, none for a parameter without a gradient yet."""
    names = ["exp_avg", "exp_avg_sq"]
    if any(group.get("amsgrad") for group in optimizer.param_groups):
        names.append("max_exp_avg_sq")
    state = optimizer.state_dict()
    by_id = get_param_id_to_sharded_param_map(model_state, _params(optimizer))
    state["state"] = {
        index: {name: torch.zeros_like(param) for name in names}
        for index, param in enumerate(_params(optimizer))
        if index in by_id and f"optimizer.state.{names[0]}.{by_id[index].key}" in saved
    }
    return state


def _common_step(state: dict[Any, dict[str, Any]]) -> torch.Tensor | None:
    """The step every parameter shares; CheckpointError where they differ (a parameter that never had a gradient)."""
    steps = [entry["step"] for entry in state.values() if "step" in entry]
    if not steps:
        return None
    if any(not torch.equal(torch.as_tensor(step), torch.as_tensor(steps[0])) for step in steps):
        raise CheckpointError(
            "the optimizer's step differs between parameters (some had no gradient in some steps); "
            "a megatron checkpoint stores one shared step."
        )
    return torch.as_tensor(steps[0]).clone()


def _restore_step(optimizer_state: dict[str, Any]) -> dict[str, Any]:
    state = dict(optimizer_state["state"])
    step = state.pop(COMMON_STEP, None)
    if step is not None:
        state = {index: {**entry, "step": step.clone()} for index, entry in state.items()}
    return {**optimizer_state, "state": state}


def _save(state: ShardedStateDict, directory: Path) -> None:
    """megatron's dist_checkpointing.save with our common strategy, which that function refuses
    ("The only supported common strategy is torch"): the same steps in the same order."""
    sharded, common = save_preprocess(state, validate_access_integrity=True)
    common_strategy = JsonSaveCommonStrategy()
    common_strategy.save_common(common, directory)
    objects, sharded = extract_matching_values(sharded, lambda value: isinstance(value, ShardedObject))
    common_strategy.save_sharded_objects(objects, directory)
    SafetensorsSaveShardedStrategy().save(sharded, directory)
    # Written last, once every rank has written: without it, load refuses the directory.
    torch.distributed.barrier()
    if torch.distributed.get_rank() == 0:
        save_config(CheckpointingConfig(SHARDED_BACKEND, FORMAT_VERSION, COMMON_BACKEND, FORMAT_VERSION), str(directory))
    torch.distributed.barrier()
