"""Runs converted builtin models as Megatron-Core GPTModels under torchrun (TP = world size, gloo).

    python -m torch.distributed.run --nproc_per_node 2 tests/megatron_tp_worker.py OUT_DIR

For tiny-gpt2 and tiny-llama: rank 0 converts the HF model into OUT_DIR/cache (the other ranks then
reuse it), every rank builds its GPTModel shard and runs a fixed batch, the logits are gathered over
TP and compared with the HF model's, then the gradients of one next-token loss, and rank 0 exports
the weights back to OUT_DIR/export-<name>. Each rank writes OUT_DIR/rank<N>.json:
{name: {"max_abs_diff", "grad_max_rel_diff", "logits_shape", "padded_vocab"}}.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.models.gpt import GPTModel
from transformers import PreTrainedModel

from trainer_core.backends.megatron.model import (
    build_gpt_model,
    causal_inputs,
    gather_tp_shards,
    init_model_parallel,
    load_shard,
    model_shard,
)
from trainer_core.models import build_builtin
from trainer_core.models.megatron import ConvertedCheckpoint, convert_to_cache, export_hf, hf_state_dict

NAMES = ("tiny-gpt2", "tiny-llama")
# 512 tokens padded to a multiple of 100 * TP = 200 -> 600: the padded rows must not leak into logits.
VOCAB_DIVISOR = 100


def fixed_batch(vocab_size: int) -> torch.Tensor:
    return torch.randint(0, vocab_size, (3, 16), generator=torch.Generator().manual_seed(1234))


def full_logits(model: GPTModel, ids: torch.Tensor) -> torch.Tensor:
    """The logits over the padded vocabulary: each rank's slice gathered over TP (autograd-aware)."""
    positions, mask = causal_inputs(ids)
    return tensor_parallel.gather_from_tensor_model_parallel_region(model(ids, positions, mask))


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1))


def gradient_diff(model: GPTModel, hf_model: PreTrainedModel, ids: torch.Tensor, converted: ConvertedCheckpoint) -> float:
    """Largest |grad| difference between the GPTModel (every TP shard, in HF layout) and the HF model
    for the same loss over the real vocabulary (padded columns cut off), over the largest |grad|."""
    next_token_loss(full_logits(model, ids)[..., : converted.arch.vocab_size], ids).backward()
    next_token_loss(hf_model(input_ids=ids).logits, ids).backward()

    # Gradients are shaped and sharded like their weights, so the weight conversion maps them too.
    grads = hf_state_dict(gather_tp_shards({name: p.grad for name, p in model.named_parameters()}), converted)
    expected = {name: p.grad for name, p in hf_model.named_parameters()}
    if converted.arch.tie_word_embeddings:
        expected["lm_head.weight"] = hf_model.get_input_embeddings().weight.grad
    assert sorted(grads) == sorted(expected), (sorted(grads), sorted(expected))
    model.zero_grad(set_to_none=True)
    scale = max(grad.abs().max().item() for grad in expected.values())
    return max((grads[name] - expected[name]).abs().max().item() for name in expected) / scale


def run(name: str, out: Path, rank: int, tp_size: int) -> dict:
    hf_model, tokenizer = build_builtin(name)
    convert = functools.partial(
        convert_to_cache,
        f"builtin:{name}",
        hf_model,
        tp_size,
        tokenizer=tokenizer,
        root=out / "cache",
        vocab_divisor=VOCAB_DIVISOR,
    )
    if rank == 0:
        convert()
    dist.barrier()
    converted = convert()  # rank 0's conversion, found in the cache

    model = build_gpt_model(converted.arch, tp_size)
    load_shard(model, converted.load_shard(rank))
    model.eval()
    ids = fixed_batch(converted.arch.vocab_size)
    with torch.no_grad():
        logits = full_logits(model, ids)
        expected = hf_model(input_ids=ids).logits
    padded = logits.shape[-1]
    diff = (logits[..., : converted.arch.vocab_size] - expected).abs().max().item()
    grad_diff = gradient_diff(model, hf_model, ids, converted)

    shards = gather_tp_shards(model_shard(model))
    if rank == 0:
        export_hf(shards, converted, out / f"export-{name}")
    dist.barrier()
    return {"max_abs_diff": diff, "grad_max_rel_diff": grad_diff, "logits_shape": list(expected.shape), "padded_vocab": padded}


def main(out: Path) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    init_model_parallel(tp_size=world)
    results = {name: run(name, out, rank, world) for name in NAMES}
    (out / f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
