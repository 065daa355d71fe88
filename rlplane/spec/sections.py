"""The sections every run spec has: model, reward, data, backend, resources, train."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StringConstraints, field_validator

from rlplane.spec.base import DataSource, ModelPath, Name, Precision, StrictModel


class LoraSpec(StrictModel):
    """Low-rank adapters instead of a full fine-tune (PEFT LoRA)."""

    r: int = Field(8, ge=1, description="Rank of the adapter matrices.")
    alpha: float = Field(16.0, gt=0, description="Scaling numerator: adapters are scaled by alpha / r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["all-linear"],
        min_length=1,
        description='Module names to adapt; "all-linear" adapts every linear layer but the output head.',
    )


class ModelSpec(StrictModel):
    """The model to train (or to use as a reference, critic or reward model)."""

    path: ModelPath = Field(
        description="Hugging Face id (gpt2, meta-llama/Llama-3.2-1B), local directory (/abs or "
        "./relative: a Hugging Face model, or an un-tarred NeMo checkpoint with model_config.yaml, "
        "converted once), builtin:<name> (tiny CPU models: builtin:tiny-gpt2, builtin:tiny-llama), "
        "or run:<id>[@step] for the output (or a given checkpoint step) of an earlier run."
    )
    revision: str | None = Field(None, description="Hugging Face branch, tag or commit; null: the default branch.")
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="dtype the weights are loaded in; auto: fp32 on CPU, the backend precision on GPU."
    )
    lora: LoraSpec | None = Field(None, description="LoRA adapters; null: full fine-tune of every weight.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    compile: bool = Field(
        False,
        description="torch.compile each decoder block for training steps (regional compilation: the blocks share one "
        "compiled graph; the first steps pay the compilation, evaluation and generation run uncompiled). torch and "
        "fsdp2 backends.",
    )
    kernels: Literal["none", "liger"] = Field(
        "none",
        description="liger: Liger Kernel's fused Triton kernels for the model's RMSNorm, SwiGLU MLP and rotary "
        "embedding (CUDA GPUs; the liger-kernel package on the worker; the architectures Liger patches: Llama, "
        "Mistral, Qwen2/3, Gemma, Phi-3, ...). none: the model's own layers. torch and fsdp2 backends.",
    )
    max_seq_len: int | None = Field(
        None,
        ge=8,
        description="Longest sequence in tokens (prompt + response); longer ones are truncated. null: the model's "
        "context length (its max_position_embeddings: 256 for the builtin models), at most 2048.",
    )
    trust_remote_code: bool = Field(
        False, description="Allow model code from the Hub repository to run; only for repositories you trust."
    )


# --- reward: where the scalar reward of a generated response comes from (ppo, grpo) ---


# scale, clip and normalize apply to every reward kind; each variant lists them last.
def _scale() -> Any:
    return Field(1.0, description="This source's rewards are multiplied by this before use.")


def _clip() -> Any:
    return Field(None, gt=0, description="Clip this source's scaled rewards to [-clip, clip]; null: no clipping.")


def _normalize() -> Any:
    return Field(
        False,
        description="Standardise the reward with the running mean and std of every reward this source gave so far "
        "(all batches, all ranks), after scale and clip (and, for sum, the weights); its state is checkpointed.",
    )


class BuiltinReward(StrictModel):
    """A reward function shipped with rlplane (e.g. randomwalks, arithmetic)."""

    kind: Literal["builtin"] = Field("builtin", description="builtin: a reward function shipped with rlplane.")
    name: Name = Field(description="Name of the builtin reward, e.g. randomwalks or arithmetic.")
    scale: float = _scale()
    clip: float | None = _clip()
    normalize: bool = _normalize()


class ModelReward(StrictModel):
    """A trained reward model scores each (prompt, response)."""

    kind: Literal["model"] = Field("model", description="model: a reward model scores each response.")
    path: ModelPath = Field(description="The reward model: usually run:<id> of a reward run; same syntax as model.path.")
    batch_size: int = Field(16, ge=1, description="Responses scored per forward pass.")
    device: str | None = Field(None, description="Device for the reward model (e.g. cuda:1); null: the policy's device.")
    scale: float = _scale()
    clip: float | None = _clip()
    normalize: bool = _normalize()


class PythonReward(StrictModel):
    """A Python function `f(prompts, responses, metadata) -> list[float]`; it must be allowed by the server."""

    kind: Literal["python"] = Field("python", description="python: call an allow-listed Python function.")
    entrypoint: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")] = Field(
        description="module:function, e.g. my_rewards.sentiment:score, called as f(prompts, responses, metadata); "
        "only entrypoints matching RLPLANE_REWARD_ENTRYPOINTS on the server and the worker run."
    )
    scale: float = _scale()
    clip: float | None = _clip()
    normalize: bool = _normalize()


class HttpReward(StrictModel):
    """POST batches of {prompts, responses, metadata} to a scoring service that answers {"rewards": [...]}."""

    kind: Literal["http"] = Field("http", description="http: a scoring service over HTTP.")
    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+[^\s]*$")] = Field(
        description="http:// or https:// URL that scores a batch."
    )
    timeout_s: float = Field(30.0, gt=0, description="Seconds to wait for one batch before retrying.")
    batch_size: int = Field(16, ge=1, description="Responses sent per request.")
    attempts: int = Field(
        3, ge=1, le=10, description="Tries per batch when the service is unreachable, times out or answers 429/5xx."
    )
    backoff_s: float = Field(1.0, ge=0, le=60, description="Wait before the second try; doubled before each later one.")
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra request headers; stored in plain text with the run, so no secrets."
    )
    scale: float = _scale()
    clip: float | None = _clip()
    normalize: bool = _normalize()


RewardSource = Annotated[BuiltinReward | ModelReward | PythonReward | HttpReward, Field(discriminator="kind")]


def _no_nested_sum(value: Any) -> Any:
    # Without this a nested sum reads "unknown kind 'sum'", which hides the fix.
    if isinstance(value, dict) and value.get("kind") == "sum":
        raise ValueError("a sum term cannot be another sum; list its terms in this sum's terms instead")
    return value


class RewardTerm(StrictModel):
    """One weighted component of a sum reward."""

    name: Name = Field(description="Component name, unique in the sum; reported as reward/<name>.")
    weight: float = Field(1.0, description="The component's weight in the total (negative: a penalty).")
    source: Annotated[RewardSource, BeforeValidator(_no_nested_sum)] = Field(
        description="Where the component comes from: a builtin, model, python or http reward (not another sum)."
    )


class SumReward(StrictModel):
    """A weighted sum of reward sources, each reported as its own component."""

    kind: Literal["sum"] = Field("sum", description="sum: a weighted sum of other reward sources.")
    terms: list[RewardTerm] = Field(
        min_length=1,
        description="The components, each {name, weight, source}: name unique (reported as reward/<name>), weight "
        "1.0 unless given (negative: a penalty), source a builtin, model, python or http reward (not a sum). "
        "total = sum of weight * component, each component after its own scale, clip and normalize.",
    )
    scale: float = _scale()
    clip: float | None = _clip()
    normalize: bool = _normalize()

    @field_validator("terms")
    @classmethod
    def _unique_names(cls, terms: list[RewardTerm]) -> list[RewardTerm]:
        names = [term.name for term in terms]
        if repeated := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"term names must be unique; {', '.join(repeated)} appears more than once: rename one")
        return terms


RewardSpec = Annotated[BuiltinReward | ModelReward | PythonReward | HttpReward | SumReward, Field(discriminator="kind")]


# --- data ---


class DataColumns(StrictModel):
    """Which column holds what; only the columns an algorithm needs are read."""

    prompt: str = Field("prompt", description="Prompt text (all algorithms).")
    response: str = Field("response", description="Target response (sft, ilql).")
    chosen: str = Field("chosen", description="Preferred response (reward, dpo).")
    rejected: str = Field("rejected", description="Dispreferred response (reward, dpo).")
    reward: str = Field("reward", description="Scalar reward of the response (ilql).")


class DataSpec(StrictModel):
    """Where examples (or prompts, for ppo/grpo) come from."""

    source: DataSource = Field(
        description="builtin:<name> (builtin:tiny-sft, builtin:tiny-preference, builtin:tiny-prompts, "
        "builtin:randomwalks, builtin:arithmetic), dataset:<id> (uploaded to rlplane), a local "
        ".jsonl/.json/.parquet file, or a Hugging Face dataset id."
    )
    subset: str | None = Field(None, description="Hugging Face dataset configuration name, e.g. main for openai/gsm8k.")
    split: str = Field("train", min_length=1, description="Split to train on.")
    eval_split: str | None = Field(None, description="Split to evaluate on; null: hold out eval_fraction of split.")
    eval_fraction: float = Field(
        0.05, ge=0, le=0.5, description="Fraction of split held out for evaluation when eval_split is null; 0: no eval."
    )
    max_samples: int | None = Field(None, ge=1, description="Use at most this many training examples; null: all.")
    columns: DataColumns = Field(default_factory=DataColumns, description="Column names in the source.")
    shuffle: bool = Field(True, description="Shuffle training examples (seeded by train.seed).")


# --- backend: how the training step is distributed ---


def _processes() -> Any:
    return Field(
        1, ge=1, le=64, description="Training processes per node on a CPU-only run (resources.gpus 0); with GPUs, one per GPU."
    )


class TorchBackend(StrictModel):
    """Plain PyTorch: one process on CPU or one GPU, DDP across GPUs."""

    kind: Literal["torch"] = Field("torch", description="torch: plain PyTorch, DDP across GPUs; the kind when backend has none.")
    precision: Precision = Field("fp32", description="Mixed precision of the training step.")
    ddp: bool = Field(True, description="Use DistributedDataParallel with more than one GPU; false allows one GPU only.")
    processes: int = _processes()


class DeepSpeedBackend(StrictModel):
    """DeepSpeed ZeRO: optimizer state, gradients and (stage 3) parameters sharded across GPUs."""

    kind: Literal["deepspeed"] = Field("deepspeed", description="deepspeed: DeepSpeed ZeRO.")
    zero_stage: int = Field(2, ge=0, le=3, description="ZeRO stage: 0 off, 1 optimizer, 2 + gradients, 3 + parameters.")
    offload: Literal["none", "cpu", "nvme"] = Field(
        "none", description="Where ZeRO keeps optimizer state (and parameters at stage 3); nvme needs stage 3."
    )
    nvme_path: str | None = Field(None, description="Local NVMe directory for offload: nvme.")
    precision: Precision = Field("bf16", description="Mixed precision of the training step.")
    zero_init: bool = Field(
        False,
        description="Build models already partitioned (deepspeed.zero.Init): no rank ever holds a whole "
        "model, for models larger than one device's memory. Needs zero_stage 3.",
    )
    ds_config: dict[str, Any] | None = Field(
        None,
        description="Escape hatch: extra DeepSpeed config merged over the generated one; keys that "
        "contradict the spec (batch sizes, ZeRO stage, offload, precision) are rejected.",
    )
    processes: int = _processes()


class Fsdp2Backend(StrictModel):
    """PyTorch FSDP2 (fully_shard): parameters, gradients and optimizer state sharded per layer."""

    kind: Literal["fsdp2"] = Field("fsdp2", description="fsdp2: PyTorch fully_shard.")
    precision: Precision = Field("bf16", description="Mixed precision of the training step.")
    reshard_after_forward: bool = Field(
        True, description="Free gathered parameters after forward (less memory, more communication)."
    )
    cpu_offload: bool = Field(False, description="Keep sharded parameters and optimizer state on CPU.")
    processes: int = _processes()


class MegatronBackend(StrictModel):
    """Megatron-Core: tensor, sequence and pipeline parallelism (context parallelism needs GPUs); data parallel over
    the rest."""

    kind: Literal["megatron"] = Field("megatron", description="megatron: Megatron-Core model parallelism.")
    tensor_parallel: int = Field(1, ge=1, description="Processes (GPUs) each layer is split across.")
    pipeline_parallel: int = Field(
        1, ge=1, description="Pipeline stages the layers are split into (megatron's 1F1B schedule); must divide the layers."
    )
    virtual_pipeline_parallel: int = Field(
        1,
        ge=1,
        description="Model chunks per pipeline stage (megatron's interleaved schedule: a smaller pipeline bubble); needs "
        "pipeline_parallel >= 3, pipeline_parallel x virtual_pipeline_parallel dividing the layers, and a multiple of "
        "pipeline_parallel micro-batches per step on each data-parallel replica.",
    )
    context_parallel: int = Field(1, ge=1, description="GPUs each sequence is split across.")
    sequence_parallel: bool = Field(
        False,
        description="Shard layer-norm and dropout activations along the sequence; needs tensor_parallel > 1.",
    )
    precision: Precision = Field("bf16", description="Mixed precision of the training step; fp32 on CPU.")
    processes: int = _processes()


def _default_backend_kind(value: Any) -> Any:
    # kind may be left out of backend: it defaults to torch, like the section itself.
    return {"kind": "torch", **value} if isinstance(value, dict) and "kind" not in value else value


BackendSpec = Annotated[
    TorchBackend | DeepSpeedBackend | Fsdp2Backend | MegatronBackend,
    Field(discriminator="kind"),
    BeforeValidator(_default_backend_kind),
]


# A run's priority by name; numbers between are allowed too (docs/scheduling.md).
PRIORITIES = {"low": 25, "normal": 50, "high": 75, "urgent": 100}


def _priority_by_name(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in PRIORITIES:
        return PRIORITIES[value.strip().lower()]
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        names = ", ".join(f"{name} ({number})" for name, number in PRIORITIES.items())
        raise ValueError(f"priority {value!r}: use a number from 0 to 100 or one of {names}")
    return value


Priority = Annotated[int, BeforeValidator(_priority_by_name), Field(ge=0, le=100)]


class ResourcesSpec(StrictModel):
    """What the run asks the scheduler for."""

    queue: Name = Field("cpu", description="Worker queue that runs it; workers serve named queues (cpu, gpu, a100, ...).")
    gpus: int = Field(0, ge=0, description="GPUs per node; 0 trains on CPU.")
    nodes: int = Field(
        1,
        ge=1,
        le=64,
        description="Workers of the queue the run spans, each running resources.gpus ranks (backend.processes on CPU); "
        "more than one are granted together, as a gang (docs/workers.md).",
    )
    cpus: int | None = Field(None, ge=1, description="CPU cores per node; null: whatever the worker grants.")
    max_attempts: int = Field(
        3,
        ge=1,
        le=20,
        description="Attempts in all when workers are lost (killed, silent, hung); trainer errors are not retried.",
    )
    priority: Priority | None = Field(
        None,
        description="0-100, or low (25), normal (50), high (75), urgent (100); null: the project's default (normal). "
        "Waiting runs start highest first, and one that cannot start may preempt lower ones that have run long enough "
        "(handed back, resumed later). Above the project's member limit (normal) needs the project's admin role.",
    )
    hang_timeout_s: int | None = Field(
        1800,
        ge=10,
        description="Kill and retry the trainer when no step finishes for this long (the first step gets at least 300 s); "
        "null: never.",
    )


class TrainSpec(StrictModel):
    """The optimization loop."""

    steps: int = Field(
        gt=0,
        description="Training steps. A step is one optimizer step; for ppo and grpo it is one "
        "rollout-and-update iteration over batch_size rollouts.",
    )
    batch_size: int = Field(
        8, gt=0, description="Global batch: examples per step over all ranks (rollouts per step for ppo/grpo)."
    )
    micro_batch_size: int | None = Field(
        None,
        gt=0,
        description="Examples per forward/backward on one rank; gradients accumulate over the rest. "
        "null: the whole per-rank batch at once.",
    )
    micro_batch_tokens: int | None = Field(
        None,
        gt=0,
        description="Cut each rank's batch into micro-batches of at most this many tokens instead of micro_batch_size "
        "examples (rows x longest row when padded, real tokens with padding_free); a longer example gets one of its "
        "own. null: micro_batch_size.",
    )
    padding_free: bool = Field(
        False,
        description="Run each micro-batch's sequences back to back in one row, with no padding (position ids restart "
        "per sequence and keep them apart); the loss and gradients are the padded step's. sft, reward, dpo, spin, "
        "ppo, grpo; not on megatron.",
    )
    lr: float = Field(1.0e-5, gt=0, description="Peak learning rate (AdamW).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    warmup_steps: int = Field(0, ge=0, description="Linear warmup from 0 to lr over this many steps.")
    schedule: Literal["constant", "linear", "cosine"] = Field("cosine", description="Learning-rate decay after warmup.")
    max_grad_norm: float | None = Field(1.0, gt=0, description="Clip the global gradient norm; null: no clipping.")
    seed: int = Field(0, ge=0, description="Seed for weights init, data order and sampling.")
    checkpoint_every: int | None = Field(None, gt=0, description="Save a full checkpoint every N steps; null: only at the end.")
    keep_last: int = Field(3, ge=1, description="Checkpoints kept (older ones are deleted; the final one always stays).")
    eval_every: int | None = Field(None, gt=0, description="Evaluate every N steps; null: only at the end.")
    log_every: int = Field(1, gt=0, description="Report metrics every N steps.")
    on_nonfinite: Literal["fail", "skip"] = Field(
        "fail",
        description="A step whose train loss, gradient norm or mean reward is NaN or infinite: fail ends the run "
        "failed (diverged: ... at step N) with no final model; skip leaves the weights and optimizer as they were "
        "for that step (as DeepSpeed skips fp16 overflow steps), counts it in train/skipped_steps and fails after "
        "max_consecutive_skips such steps in a row. Either way a non-finite update is never applied.",
    )
    max_consecutive_skips: int = Field(
        10, ge=1, description="With on_nonfinite: skip, the run fails once this many steps in a row were skipped."
    )
