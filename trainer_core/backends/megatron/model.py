"""Build a Megatron-Core GPTModel for one tensor-parallel rank from an `Architecture`, and run it.

Needs torch.distributed initialised (gloo on CPU, nccl on GPU) and megatron's model-parallel
groups (`init_model_parallel`). Uses megatron-core's local layer spec (no Transformer Engine), so
the same code builds on a CPU test machine and a GPU node.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core import parallel_state, tensor_parallel
from megatron.core.models.gpt import GPTModel
from megatron.core.transformer.transformer_config import TransformerConfig

from trainer_core.backends.megatron.cpu_shim import apply_cpu_shim, tensors_stay_on_cpu
from trainer_core.backends.megatron.sequence_parallel import layer_spec
from trainer_core.backends.megatron.virtual_stages import VirtualStages
from trainer_core.models.megatron.config import Architecture
from trainer_core.models.megatron.convert import StateDict


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's "gelu_new". megatron's own fast_gelu is wrapped in torch.compile, which CPU runs avoid."""
    return F.gelu(x, approximate="tanh")


_ACTIVATIONS = {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "swiglu": F.silu}


def init_model_parallel(tp_size: int, seed: int = 0, pp_size: int = 1, vp_size: int = 1) -> None:
    """Megatron's parallel groups (TP of `tp_size`, `pp_size` pipeline stages of `vp_size` virtual stages each, data
    parallel over the rest) and its RNG tracker.

    The inference RNG tracker forks nothing; with every dropout at 0 no tracked RNG is drawn, and
    the CUDA tracker would need CUDA generators a CPU machine lacks.
    """
    apply_cpu_shim()
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp_size,
            pipeline_model_parallel_size=pp_size,
            virtual_pipeline_model_parallel_size=vp_size if vp_size > 1 else None,
        )
    tensor_parallel.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True, force_reset_rng=True)


def transformer_config(
    arch: Architecture,
    tp_size: int,
    params_dtype: torch.dtype = torch.float32,
    sequence_parallel: bool = False,
    pp_size: int = 1,
    vp_size: int = 1,
) -> TransformerConfig:
    """The TransformerConfig under which a GPTModel computes what the Hugging Face model does."""
    return TransformerConfig(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_query_groups,
        kv_channels=arch.head_dim,
        ffn_hidden_size=arch.ffn_hidden_size,
        normalization=arch.normalization,
        layernorm_epsilon=arch.norm_eps,
        activation_func=_ACTIVATIONS[arch.activation],
        gated_linear_unit=arch.gated_linear_unit,
        add_bias_linear=arch.add_bias_linear,
        # Exactness against the HF model: no dropout, no fused kernels (CUDA-only or compiled).
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        tensor_model_parallel_size=tp_size,
        sequence_parallel=sequence_parallel,
        pipeline_model_parallel_size=pp_size,
        virtual_pipeline_model_parallel_size=vp_size if vp_size > 1 else None,
        pipeline_dtype=params_dtype,
        # Batches differ in length: the schedules send each activation's shape before it. (The check that
        # comes with it is for MoE token dispatch, which these dense models do not use.)
        variable_seq_lengths=pp_size > 1,
        moe_token_dispatcher_type="alltoall" if pp_size > 1 else "allgather",
        params_dtype=params_dtype,
        use_cpu_initialization=True,
    )


def build_gpt_model(
    arch: Architecture,
    tp_size: int,
    params_dtype: torch.dtype = torch.float32,
    parallel_output: bool = True,
    sequence_parallel: bool = False,
    pp_size: int = 1,
    vp_size: int = 1,
) -> GPTModel | VirtualStages:
    """This rank's GPTModel with initial (random) weights; load a converted shard into it next.

    `parallel_output=True` keeps each rank's vocabulary slice of the logits (for megatron's
    vocab-parallel cross entropy); False gathers the full padded vocabulary on every rank.
    `sequence_parallel`: the TP ranks split the sequence between the TP regions (sequence_parallel.py).
    `pp_size` > 1: this rank's pipeline stage (megatron's parallel state says which), its share of the layers;
    `vp_size` > 1: its virtual stages, one GPTModel each, in a VirtualStages.
    """
    arch.check_tp_size(tp_size)
    apply_cpu_shim()
    sequence_parallel = sequence_parallel and tp_size > 1
    config = transformer_config(arch, tp_size, params_dtype, sequence_parallel, pp_size, vp_size)
    spec = layer_spec(arch.normalization, arch.num_layers // (pp_size * vp_size), sequence_parallel)

    def chunk(vp_stage: int | None) -> GPTModel:
        stage = {"ignore_virtual": vp_stage is None, "vp_stage": vp_stage}
        with tensors_stay_on_cpu():  # a tied embedding's last-stage copy is moved to CUDA while it is built
            return GPTModel(
                config=config,
                transformer_layer_spec=spec,
                vocab_size=arch.padded_vocab_size(tp_size),
                max_sequence_length=arch.max_position_embeddings,
                parallel_output=parallel_output,
                share_embeddings_and_output_weights=arch.tie_word_embeddings,
                position_embedding_type=arch.position_embedding_type,
                rotary_base=arch.rotary_base,  # GPTModel types it int, but only uses it as a float exponent base
                pre_process=parallel_state.is_pipeline_first_stage(**stage),
                post_process=parallel_state.is_pipeline_last_stage(**stage),
                vp_stage=vp_stage,
            )

    if vp_size == 1:
        return chunk(None)
    return VirtualStages([chunk(index) for index in range(vp_size)])


def load_shard(model: GPTModel, shard: StateDict) -> None:
    """Copy a converted shard into `model`; RuntimeError naming any missing or unexpected weight."""
    missing, unexpected = model.load_state_dict(shard, strict=False)
    # megatron registers `_extra_state` entries (fp8 metadata) that converted weights never carry.
    missing = [name for name in missing if not name.endswith("._extra_state")]
    if missing or unexpected:
        raise RuntimeError(f"converted shard does not fit the GPTModel: missing {missing}, unexpected {unexpected}")


def model_shard(model: GPTModel) -> StateDict:
    """This rank's weights in the converted-shard format (the inverse of `load_shard`)."""
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items() if not name.endswith("._extra_state")}


def causal_inputs(input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(position_ids, attention_mask) for a batch of unpadded rows [batch, seq].

    megatron's own default mask is allocated on "cuda"; this one lives beside `input_ids`. True
    marks a masked (future) position, megatron's convention, shaped [batch, 1, seq, seq].
    """
    batch, length = input_ids.shape
    positions = torch.arange(length, device=input_ids.device).unsqueeze(0).expand(batch, length)
    future = torch.triu(torch.ones(length, length, dtype=torch.bool, device=input_ids.device), diagonal=1)
    return positions, future.view(1, 1, length, length).expand(batch, 1, length, length)


def collective_device() -> torch.device:
    """Where a tensor must be for this process's collectives: NCCL moves CUDA tensors only, gloo CPU ones."""
    nccl = torch.distributed.is_initialized() and torch.distributed.get_backend() == "nccl"
    return torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")


def gather_tp_shards(shard: StateDict) -> list[StateDict]:
    """Every TP rank's shard (rank order) on every rank of this rank's TP group, on the device each tensor came from.

    Tensors, not objects, travel (all_gather per weight): a rank's shards all share names and
    shapes, and no collective here pickles anything. A weight visits the collective's device one at a time (a
    checkpoint's CPU copies gathered over NCCL), so a whole model never sits there twice.
    """
    size = parallel_state.get_tensor_model_parallel_world_size()
    if size == 1:
        return [dict(shard)]
    group = parallel_state.get_tensor_model_parallel_group()
    device = collective_device()
    shards: list[StateDict] = [{} for _ in range(size)]
    for name in sorted(shard):
        tensor = shard[name].contiguous()
        parts = [torch.empty_like(tensor, device=device) for _ in range(size)]
        torch.distributed.all_gather(parts, tensor.to(device), group=group)
        for rank, part in enumerate(parts):
            shards[rank][name] = part.to(tensor.device)
    return shards
