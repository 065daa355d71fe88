"""Cross-field rules of a run spec about its backend: megatron's layout and what it runs, DeepSpeed's options and
its ds_config, torch without DDP, fp16. rules.py runs them in its order (RULES) with the others."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rlplane.spec.algorithms import MEGATRON_ALGORITHMS
from rlplane.spec.shapes import BUILTIN_SHAPES
from rlplane.spec.violation import Rules, Violation

if TYPE_CHECKING:
    from rlplane.spec import RunSpec


def megatron_layout_fits(spec: RunSpec) -> Rules:
    """megatron: tensor_parallel * pipeline_parallel * context_parallel must divide the processes (GPUs, or CPU processes)."""
    backend = spec.backend
    if backend.kind != "megatron":
        return
    if spec.world_size % spec.model_parallel_size:
        where = (
            f"the {spec.world_size} GPUs (resources.gpus * resources.nodes); change the parallel sizes or the GPUs"
            if spec.resources.gpus
            else f"the {spec.world_size} CPU processes (backend.processes * resources.nodes); change the parallel sizes or "
            "backend.processes"
        )
        yield Violation(
            ("backend", "tensor_parallel"),
            f"tensor_parallel * pipeline_parallel * context_parallel = {spec.model_parallel_size} must divide {where}",
        )


def megatron_tensor_parallel_fits_the_builtin_model(spec: RunSpec) -> Rules:
    """megatron tensor_parallel must divide a builtin model's attention heads, key/value heads and MLP width
    (other models are checked when the trainer has read their config)."""
    if spec.model is None:
        return
    backend, path = spec.backend, spec.model.path
    if backend.kind != "megatron" or not path.startswith("builtin:"):
        return
    shape = BUILTIN_SHAPES.get(path.removeprefix("builtin:"))
    if shape is None:
        return  # an unknown builtin name is reported by the model loader, with the names that exist
    parts = {"attention heads": shape.heads, "key/value heads": shape.kv_heads, "MLP width": shape.ffn}
    uneven = [f"{name} ({count})" for name, count in parts.items() if count % backend.tensor_parallel]
    if uneven:
        fits = [tp for tp in range(1, shape.heads + 1) if all(count % tp == 0 for count in parts.values())]
        yield Violation(
            ("backend", "tensor_parallel"),
            f"tensor_parallel {backend.tensor_parallel} does not divide {path}'s {', '.join(uneven)}: "
            f"use one of {', '.join(map(str, fits))}",
        )


def megatron_on_cpu(spec: RunSpec) -> Rules:
    """megatron on CPU (resources.gpus 0) runs in fp32, without context parallelism (it needs Transformer Engine)."""
    backend = spec.backend
    if backend.kind != "megatron" or spec.resources.gpus:
        return
    if backend.context_parallel > 1:
        yield Violation(
            ("backend", "context_parallel"),
            "context_parallel needs GPUs (megatron-core's context parallelism runs in Transformer Engine's attention): "
            "set backend.context_parallel: 1 or resources.gpus >= 1",
        )
    if backend.precision != "fp32":
        yield Violation(
            ("backend", "precision"),
            f"megatron on CPU trains in fp32, not {backend.precision}: set backend.precision: fp32 or resources.gpus >= 1",
        )


# MEGATRON_ALGORITHMS: the recipes the megatron backend runs. ILQL is not one: its Q/V heads, their target
# copies and its head-guided decoding read the trunk inside its own generation loop, which the
# backend's generate() (sampling from the shards) does not cover yet.


def megatron_algorithms(spec: RunSpec) -> Rules:
    """megatron trains sft, dpo, spin, grpo, ppo (without ppo.critic) and reward; ilql is not supported on it yet."""
    if spec.backend.kind == "megatron" and spec.algorithm not in MEGATRON_ALGORITHMS:
        yield Violation(
            ("backend", "kind"),
            f"megatron: {spec.algorithm} not yet supported (it trains {', '.join(MEGATRON_ALGORITHMS)}; ilql's "
            "value-guided decoding needs the heads inside generation); use deepspeed or fsdp2",
        )
    elif spec.backend.kind == "megatron" and spec.ppo is not None and spec.ppo.critic is not None:
        yield Violation(
            ("ppo", "critic"),
            "megatron: ppo.critic (a separate critic model) not yet supported; remove it (the value head then shares "
            "the policy's trunk) or use deepspeed or fsdp2",
        )


def megatron_pipeline_fits(spec: RunSpec) -> Rules:
    """megatron virtual_pipeline_parallel needs pipeline_parallel >= 3 and a multiple of pipeline_parallel micro-batches
    per step; pipeline_parallel x virtual_pipeline_parallel must divide a builtin model's layers (other models are
    checked when the trainer has read their config)."""
    if spec.model is None:
        return
    backend, path = spec.backend, spec.model.path
    if backend.kind != "megatron":
        return
    virtual = backend.virtual_pipeline_parallel
    if virtual > 1 and backend.pipeline_parallel < 3:
        yield Violation(
            ("backend", "virtual_pipeline_parallel"),
            f"virtual_pipeline_parallel needs pipeline_parallel >= 3, not {backend.pipeline_parallel} (with 2 stages "
            "megatron-core's interleaved schedule exchanges activation shapes with one rank in both directions at once "
            "and mismatches them): raise pipeline_parallel or set virtual_pipeline_parallel: 1",
        )
        return
    steps = spec.gradient_accumulation_steps
    if virtual > 1 and steps % backend.pipeline_parallel:
        yield Violation(
            ("train", "micro_batch_size"),
            f"virtual_pipeline_parallel needs a multiple of pipeline_parallel ({backend.pipeline_parallel}) micro-batches "
            f"per optimizer step on each data-parallel replica (megatron's interleaved schedule runs them in groups of "
            f"that many); this spec gives {steps} ({spec.update_batch_size} examples over {spec.data_parallel_size} "
            f"replica(s) in micro-batches of {spec.micro_batch_size}): pick a train.micro_batch_size that gives a "
            "multiple, or set virtual_pipeline_parallel: 1",
        )
    shape = BUILTIN_SHAPES.get(path.removeprefix("builtin:")) if path.startswith("builtin:") else None
    chunks = backend.pipeline_parallel * virtual
    if shape is None or shape.layers % chunks == 0:
        return
    if virtual == 1:
        fits = [pp for pp in range(1, shape.layers + 1) if shape.layers % pp == 0]
        yield Violation(
            ("backend", "pipeline_parallel"),
            f"pipeline_parallel {backend.pipeline_parallel} does not divide {path}'s {shape.layers} layers: "
            f"use one of {', '.join(map(str, fits))}",
        )
        return
    fits = [vp for vp in range(1, shape.layers + 1) if shape.layers % (backend.pipeline_parallel * vp) == 0]
    yield Violation(
        ("backend", "virtual_pipeline_parallel"),
        f"pipeline_parallel {backend.pipeline_parallel} x virtual_pipeline_parallel {virtual} = {chunks} chunks do not "
        f"divide {path}'s {shape.layers} layers: use virtual_pipeline_parallel "
        + (", ".join(map(str, fits)) if fits else "1 with a pipeline_parallel that divides them"),
    )


def megatron_sequence_parallel_needs_tp(spec: RunSpec) -> Rules:
    """megatron sequence_parallel needs tensor_parallel > 1."""
    backend = spec.backend
    if backend.kind == "megatron" and backend.sequence_parallel and backend.tensor_parallel == 1:
        yield Violation(
            ("backend", "sequence_parallel"),
            "sequence_parallel shards along the tensor-parallel group: set tensor_parallel > 1 or sequence_parallel: false",
        )


def torch_without_ddp_is_single_gpu(spec: RunSpec) -> Rules:
    """backend torch with ddp: false runs one process, so it allows at most one GPU on one node."""
    if spec.backend.kind == "torch" and not spec.backend.ddp and spec.world_size > 1:
        yield Violation(
            ("backend", "ddp"),
            f"ddp: false trains in one process but the run asks for {spec.world_size} GPUs; set ddp: true or resources.gpus: 1",
        )


# Backends whose model is the Hugging Face module the speed switches change in place (megatron trains converted
# shards; DeepSpeed's engine is not measured with them).
SPEED_SWITCH_BACKENDS = ("torch", "fsdp2")


def model_speed_switches_fit(spec: RunSpec) -> Rules:
    """model.compile and model.kernels run on the torch and fsdp2 backends; kernels liger needs a GPU (Triton)."""
    if spec.model is None:
        return
    model, kind = spec.model, spec.backend.kind
    for field, on in (("compile", model.compile), ("kernels", model.kernels != "none")):
        if on and kind not in SPEED_SWITCH_BACKENDS:
            yield Violation(
                ("model", field),
                f"model.{field} is for the {' and '.join(SPEED_SWITCH_BACKENDS)} backends, not {kind}: "
                f"use backend.kind torch or fsdp2, or remove model.{field}",
            )
    if model.kernels == "liger" and spec.resources.gpus == 0:
        yield Violation(
            ("model", "kernels"),
            "kernels: liger runs Triton kernels on CUDA GPUs: set resources.gpus >= 1 or model.kernels: none",
        )


def fp16_needs_gpu(spec: RunSpec) -> Rules:
    """backend.precision fp16 needs a GPU (its loss scaling runs on CUDA); bf16 and fp32 run on CPU."""
    if spec.backend.precision == "fp16" and spec.resources.gpus == 0:
        yield Violation(("backend", "precision"), "fp16 needs a GPU: use bf16 or fp32 on CPU, or set resources.gpus >= 1")


def zero_init_needs_stage_3(spec: RunSpec) -> Rules:
    """deepspeed zero_init (models built partitioned) needs zero_stage 3, the stage that partitions parameters."""
    backend = spec.backend
    if backend.kind == "deepspeed" and backend.zero_init and backend.zero_stage != 3:
        yield Violation(("backend", "zero_init"), "zero_init partitions parameters as models are built: set zero_stage: 3")


def deepspeed_offload_needs_zero(spec: RunSpec) -> Rules:
    """deepspeed offload needs zero_stage >= 1, and offload nvme needs zero_stage 3 and a nvme_path."""
    backend = spec.backend
    if backend.kind != "deepspeed" or backend.offload == "none":
        return
    if backend.zero_stage == 0:
        yield Violation(("backend", "offload"), "offload needs ZeRO: set zero_stage >= 1 or offload: none")
    if backend.offload == "nvme" and backend.zero_stage != 3:
        yield Violation(("backend", "offload"), "offload: nvme needs zero_stage: 3 (ZeRO-Infinity); or offload: cpu")
    if backend.offload == "nvme" and not backend.nvme_path:
        yield Violation(("backend", "nvme_path"), "offload: nvme needs nvme_path: a directory on a local NVMe drive")


def _lookup(config: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(config, dict) or key not in config:
            return None
        config = config[key]
    return config


def ds_config_agrees_with_spec(spec: RunSpec) -> Rules:
    """backend.ds_config must not contradict the spec's own fields (ZeRO stage, offload, batch sizes, precision)."""
    backend = spec.backend
    if backend.kind != "deepspeed" or not backend.ds_config:
        return
    batch_field = "train.batch_size" if spec.update_batch_size == spec.train.batch_size else "ppo.minibatch_size"
    micro = spec.train.micro_batch_size
    micro_text = f"train.micro_batch_size={micro or f'null, so {spec.micro_batch_size}'}"
    accumulation = f"the {spec.gradient_accumulation_steps} implied by {batch_field} and train.micro_batch_size"
    stage, offload = f"backend.zero_stage={backend.zero_stage}", f"backend.offload={backend.offload!r}"
    precision = f"backend.precision={backend.precision!r}"
    # (keys in ds_config, the value the spec implies, how to name it, the field to set instead)
    checks = [
        (("zero_optimization", "stage"), backend.zero_stage, stage, "backend.zero_stage"),
        (("zero_optimization", "offload_optimizer", "device"), backend.offload, offload, "backend.offload"),
        (("zero_optimization", "offload_param", "device"), backend.offload, offload, "backend.offload"),
        (("train_batch_size",), spec.update_batch_size, f"{batch_field}={spec.update_batch_size}", batch_field),
        (("train_micro_batch_size_per_gpu",), spec.micro_batch_size, micro_text, "train.micro_batch_size"),
        (("gradient_accumulation_steps",), spec.gradient_accumulation_steps, accumulation, "train.micro_batch_size"),
        (("bf16", "enabled"), backend.precision == "bf16", precision, "backend.precision"),
        (("fp16", "enabled"), backend.precision == "fp16", precision, "backend.precision"),
    ]
    for keys, expected, described, fix in checks:
        value = _lookup(backend.ds_config, keys)
        if value is None or value == "auto" or value == expected:
            continue
        key = ".".join(keys)
        yield Violation(
            ("backend", "ds_config", *keys),
            f"ds_config {key}={json.dumps(value, default=str)} conflicts with {described}; "
            f"set {fix} and remove {key} from ds_config",
        )
