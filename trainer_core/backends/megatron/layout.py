"""Where the converted transformer sits in the recipe's model, and what stays whole beside it.

The megatron backend trains a recipe's model with its Hugging Face transformer replaced by a
GPTModel shard. The recipe's model may be that transformer (SFT, DPO, GRPO), a sequence
classifier (the reward recipe: the trunk and a score head) or a module around one (PPO's
actor-critic: `policy.` and a value head). A `Layout` says which of the recipe's parameter names
go through the weight conversion (those under `prefix`, without it) and which small heads are kept
as they are, the same on every TP rank (`kept`), and, under pipeline parallelism, which stage's
layers this rank holds (`stage`; the heads sit on the last). Every tensor shaped like the weights
(weights, Adam's moments, optimizer-group probes) maps through `to_shard` / `to_hf` with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer_core.backends.megatron.model import collective_device, gather_tp_shards
from trainer_core.backends.megatron.pipeline import Stage, gather_stages, stage_weights, whole_model_names
from trainer_core.models.megatron.config import Architecture
from trainer_core.models.megatron.convert import StateDict, hf_to_megatron, megatron_to_hf
from trainer_core.models.megatron.sharding import shard, unshard

LM_HEAD = "lm_head.weight"


@dataclass(frozen=True)
class Layout:
    arch: Architecture
    prefix: str = ""  # the transformer's name in the recipe's model, with its dot ("policy.")
    kept: tuple[str, ...] = ()  # the recipe's names of replicated parameters (score or value head)
    lm_head: bool = True  # False: a trunk without an LM head (a classifier); the conversion's tied lm_head is dropped
    stage: Stage | None = None  # under pipeline parallelism, the layers this rank holds (heads: on the last stage)

    @property
    def holds_heads(self) -> bool:
        return self.stage is None or self.stage.last


def to_shard(named: StateDict, layout: Layout, tp_rank: int, tp_size: int) -> StateDict:
    """The recipe's named tensors shaped like its weights -> this rank's: GPTModel-named shards of its TP rank and
    pipeline stage, kept names as they are (on the last stage)."""
    kept = set(layout.kept)
    trunk = {
        name.removeprefix(layout.prefix): t for name, t in named.items() if name not in kept and name.startswith(layout.prefix)
    }
    out = stage_weights(shard(hf_to_megatron(trunk, layout.arch), layout.arch, tp_rank, tp_size), layout.stage, layout.arch)
    if not layout.holds_heads:
        return out
    return out | {name: named[name].detach().clone() for name in layout.kept if name in named}


def to_hf(local: StateDict, layout: Layout, device: torch.device | None = None) -> StateDict:
    """This rank's tensors (`to_shard`'s names) -> the recipe's whole named tensors (a collective over the TP group,
    and over the pipeline where there is one: every rank ends with the whole).

    Kept tensors are the last stage's: replicated over TP, so every TP rank holds the same."""
    kept = set(layout.kept)
    trunk = unshard(gather_tp_shards({n: t for n, t in local.items() if n not in kept}), layout.arch)
    mine = whole_model_names(trunk, layout.stage, layout.arch) | {name: local[name] for name in layout.kept if name in local}
    whole = gather_stages(mine, layout.stage, device or collective_device())
    heads = {name: whole.pop(name) for name in layout.kept}
    trunk = megatron_to_hf(whole, layout.arch)
    if not layout.lm_head:
        trunk.pop(LM_HEAD, None)
    return {layout.prefix + name: t for name, t in trunk.items()} | heads
