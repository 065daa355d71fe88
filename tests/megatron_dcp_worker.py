"""Saves and loads Megatron distributed checkpoints under torchrun (TP = world size, gloo, CPU).

    python -m torch.distributed.run --nproc_per_node 2 tests/megatron_dcp_worker.py tp2-save OUT VOCAB_DIVISOR
    python -m torch.distributed.run --nproc_per_node 1 tests/megatron_dcp_worker.py tp1-load OUT VOCAB_DIVISOR
    python -m torch.distributed.run --nproc_per_node 2 tests/megatron_dcp_worker.py tp2-load OUT VOCAB_DIVISOR

tp2-save: the converted tiny Llama takes 2 AdamW steps, is saved to OUT/ckpt-tp2, and loaded into a
  freshly built model and optimizer; each rank compares the two, takes one more step with each and
  writes OUT/tp2-save-rank<N>.json. Rank 0 also keeps what the other modes compare against: the
  TP-gathered weights, Adam moments and logits, cut to the real vocabulary (OUT/full.safetensors).
tp1-load: OUT/ckpt-tp2 into a TP=1 model (OUT/tp1-load-rank0.json), then saved again as OUT/ckpt-tp1.
tp2-load: OUT/ckpt-tp1 back into TP=2 (OUT/tp2-load-rank<N>.json).
tied-gpt2 (1 process): tiny GPT-2 saved and loaded before any step and after two (OUT/tied-gpt2-rank0.json).

VOCAB_DIVISOR pads the vocabulary to a multiple of divisor * TP: 128 pads the 512 tokens to 512 under
both TP sizes, 80 to 640 under TP=2 and 560 under TP=1 (megatron's allow_shape_mismatch path).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core import parallel_state, tensor_parallel
from megatron.core.dist_checkpointing.core import CheckpointingConfig
from megatron.core.models.gpt import GPTModel
from safetensors.torch import load_file, save_file

from trainer_core.backends.megatron.dist_checkpoint import load_distributed, save_distributed
from trainer_core.backends.megatron.model import build_gpt_model, causal_inputs, gather_tp_shards, init_model_parallel, load_shard
from trainer_core.models import build_builtin
from trainer_core.models.megatron import architecture_from_hf, hf_to_megatron, shard, unshard
from trainer_core.models.megatron.config import Architecture

MOMENTS = ("exp_avg", "exp_avg_sq")
EXTRA = {"step": 2, "data_position": 6, "note": "resume here"}
LR = 1e-2


def converted(name: str, vocab_divisor: int) -> tuple[Architecture, dict[str, torch.Tensor]]:
    """A builtin model's architecture and its weights in Megatron's TP=1 layout."""
    hf_model, _ = build_builtin(name)
    arch = architecture_from_hf(hf_model.config, vocab_divisor=vocab_divisor)
    return arch, hf_to_megatron(hf_model.state_dict(), arch)


def fixed_batch(vocab_size: int) -> torch.Tensor:
    return torch.randint(0, vocab_size, (3, 16), generator=torch.Generator().manual_seed(1234))


def loss_of(model: GPTModel, ids: torch.Tensor) -> torch.Tensor:
    inputs = ids[:, :-1]
    positions, mask = causal_inputs(inputs)
    return model(inputs, positions, mask, labels=ids[:, 1:]).mean()  # megatron's vocab-parallel cross entropy


def train_step(model: GPTModel, optimizer: torch.optim.Optimizer, ids: torch.Tensor) -> float:
    loss = loss_of(model, ids)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def full_logits(model: GPTModel, ids: torch.Tensor, arch: Architecture) -> torch.Tensor:
    """Logits over the real vocabulary: each rank's slice gathered over TP, the padding cut off."""
    positions, mask = causal_inputs(ids)
    with torch.no_grad():
        logits = tensor_parallel.gather_from_tensor_model_parallel_region(model(ids, positions, mask))
    return logits[..., : arch.vocab_size].contiguous()


def weights_of(model: GPTModel) -> dict[str, torch.Tensor]:
    return {f"weight/{name}": param.detach().clone() for name, param in model.named_parameters()}


def rank_state(model: GPTModel, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """This rank's weights and Adam moments, `weight/<name>`, `exp_avg/<name>`, ...; the step as `step`."""
    out = weights_of(model)
    for name, param in model.named_parameters():
        for moment in MOMENTS:
            out[f"{moment}/{name}"] = optimizer.state[param][moment].detach().clone()
    out["step"] = next(iter(optimizer.state.values()))["step"].detach().clone()
    return out


def full_state(model: GPTModel, optimizer: torch.optim.Optimizer, arch: Architecture) -> dict[str, torch.Tensor]:
    """rank_state gathered over TP into TP=1 layout, vocabulary padding cut (moments are sharded like weights)."""
    local = rank_state(model, optimizer)
    out = {"step": local.pop("step")}
    for kind in ("weight", *MOMENTS):
        part = {name.split("/", 1)[1]: t for name, t in local.items() if name.startswith(f"{kind}/")}
        out.update({f"{kind}/{name}": t for name, t in unshard(gather_tp_shards(part), arch).items()})
    return out


def differences(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> list[str]:
    """Names whose tensors are not bit-identical (or missing on one side)."""
    names = sorted(set(actual) | set(expected))
    return [n for n in names if n not in actual or n not in expected or not torch.equal(actual[n], expected[n])]


def fresh(arch: Architecture, tp_size: int, lr: float) -> tuple[GPTModel, torch.optim.Optimizer]:
    """A randomly initialised model and an optimizer with other hyperparameters: the load must fix both."""
    torch.manual_seed(99)
    model = build_gpt_model(arch, tp_size)
    return model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.5)


def tp2_save(out: Path, rank: int, world: int, vocab_divisor: int) -> dict:
    arch, weights = converted("tiny-llama", vocab_divisor)
    model = build_gpt_model(arch, world)
    load_shard(model, shard(weights, arch, rank, world))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    ids = fixed_batch(arch.vocab_size)
    for _ in range(2):
        train_step(model, optimizer, ids)
    save_distributed(out / "ckpt-tp2", model, optimizer, EXTRA)

    original = rank_state(model, optimizer)
    full = {**full_state(model, optimizer, arch), "logits": full_logits(model, ids, arch)}
    if rank == 0:
        save_file(full, str(out / "full.safetensors"))

    loaded_model, loaded_optimizer = fresh(arch, world, lr=0.5)
    differed = differences(weights_of(loaded_model), {name: t for name, t in original.items() if name.startswith("weight/")})
    extra = load_distributed(out / "ckpt-tp2", loaded_model, loaded_optimizer)
    result = {
        "differed_before_load": len(differed),
        "differences": differences(rank_state(loaded_model, loaded_optimizer), original),
        "extra": extra,
        "lr": loaded_optimizer.param_groups[0]["lr"],
        "weight_decay": loaded_optimizer.param_groups[0]["weight_decay"],
    }
    # Resume exact: one more step from each, then the loss after it (which the moments and step shape).
    for name, (m, o) in {"original": (model, optimizer), "loaded": (loaded_model, loaded_optimizer)}.items():
        step_loss = train_step(m, o, ids)
        with torch.no_grad():
            result[name] = {"step_loss": step_loss, "loss_after": loss_of(m, ids).item()}
    return result


def compare_with_saved(out: Path, model: GPTModel, optimizer: torch.optim.Optimizer, arch: Architecture) -> dict:
    """The loaded state against tp2-save's gathered original: names that differ, the largest logit difference."""
    expected = load_file(str(out / "full.safetensors"))
    logits = full_logits(model, fixed_batch(arch.vocab_size), arch)
    return {
        "padded_vocab": arch.padded_vocab_size(parallel_state.get_tensor_model_parallel_world_size()),
        "differences": differences(full_state(model, optimizer, arch), {k: v for k, v in expected.items() if k != "logits"}),
        "logits_max_abs_diff": (logits - expected["logits"]).abs().max().item(),
        "lr": optimizer.param_groups[0]["lr"],
    }


def tp1_load(out: Path, rank: int, world: int, vocab_divisor: int) -> dict:
    arch, _ = converted("tiny-llama", vocab_divisor)
    model, optimizer = fresh(arch, world, lr=0.5)
    extra = load_distributed(out / "ckpt-tp2", model, optimizer)
    save_distributed(out / "ckpt-tp1", model, optimizer, extra)
    return {**compare_with_saved(out, model, optimizer, arch), "extra": extra}


def tp2_load(out: Path, rank: int, world: int, vocab_divisor: int) -> dict:
    arch, _ = converted("tiny-llama", vocab_divisor)
    model, optimizer = fresh(arch, world, lr=0.5)
    extra = load_distributed(out / "ckpt-tp1", model, optimizer)
    return {**compare_with_saved(out, model, optimizer, arch), "extra": extra}


def tied_gpt2(out: Path, rank: int, world: int, vocab_divisor: int) -> dict:
    """GPT-2 (output layer tied to the embedding) saved before its first step (no moments yet) and after two."""
    arch, weights = converted("tiny-gpt2", vocab_divisor)
    model = build_gpt_model(arch, world)
    load_shard(model, shard(weights, arch, rank, world))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    result = {}
    for steps in (0, 2):
        for _ in range(steps):
            train_step(model, optimizer, fixed_batch(arch.vocab_size))
        save_distributed(out / f"ckpt-gpt2-step{steps}", model, optimizer, {"step": steps})
        loaded_model, loaded_optimizer = fresh(arch, world, lr=0.5)
        extra = load_distributed(out / f"ckpt-gpt2-step{steps}", loaded_model, loaded_optimizer)
        state = rank_state if steps else lambda m, _: weights_of(m)  # before a step there are no moments
        result[f"step{steps}"] = {
            "differences": differences(state(loaded_model, loaded_optimizer), state(model, optimizer)),
            "moments": len(loaded_optimizer.state),
            "extra": extra,
            "lr": loaded_optimizer.param_groups[0]["lr"],
        }
    result["refusals"] = refusals(out, model, optimizer)
    return result


def refusals(out: Path, model: GPTModel, optimizer: torch.optim.Optimizer) -> dict[str, str]:
    """The errors load_distributed gives for an unfinished save and for megatron's own (pickled) format."""
    unfinished, foreign = out / "unfinished", out / "torch-dist"
    unfinished.mkdir()
    shutil.copytree(out / "ckpt-gpt2-step2", foreign)
    # megatron's own default: DCP's pickled .metadata and a torch.saved common.pt
    config = CheckpointingConfig(sharded_backend="torch_dist", common_backend="torch")
    (foreign / "metadata.json").write_text(json.dumps(dataclasses.asdict(config)))
    messages = {}
    for name, directory in {"unfinished": unfinished, "torch_dist": foreign}.items():
        try:
            load_distributed(directory, model, optimizer)
        except Exception as error:  # the message is what the test checks
            messages[name] = f"{type(error).__name__}: {error}"
    return messages


MODES = {"tp2-save": tp2_save, "tp1-load": tp1_load, "tp2-load": tp2_load, "tied-gpt2": tied_gpt2}


def main(mode: str, out: Path, vocab_divisor: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    init_model_parallel(tp_size=world)
    result = MODES[mode](out, rank, world, vocab_divisor)
    (out / f"{mode}-rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
