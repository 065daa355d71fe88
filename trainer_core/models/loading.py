"""`model.path` -> (model, tokenizer): builtin:<name>, run:<id>[@step], a local directory (a Hugging Face
one, or an un-tarred NeMo checkpoint: converted once, trainer_core/models/megatron/nemo.py), or a Hub id.

`kind="causal"` gives a language model; `kind="score"` a one-output sequence-classification head
(reward model, critic). A causal checkpoint loads as `score` too: the body keeps its weights and
the head starts from `seed`, which is how a reward model is initialised from an SFT run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Protocol

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlplane.layout import CHECKPOINTS, MANIFEST, RUNS_DIR_ENV, step_dir_name
from rlplane.spec.base import parse_run_ref
from trainer_core.models.builtin import ModelKind, build_builtin, builtin_names, score_config
from trainer_core.models.errors import ModelError

__all__ = ["DirectoryResolver", "ModelError", "RunResolver", "load_model", "torch_dtype"]

NEMO_CONFIG = "model_config.yaml"  # an un-tarred NeMo checkpoint (trainer_core/models/megatron/nemo.py)

DType = Literal["auto", "fp32", "bf16", "fp16"]
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_LOCAL_PREFIXES = ("/", "./", "../", "~")


class RunResolver(Protocol):
    """Finds the checkpoint directory of an earlier run; the worker supplies the real lookup."""

    def resolve(self, run_id: int, step: int | None) -> Path:
        """The directory holding run `run_id`'s model at `step` (None: its final model)."""
        ...


class DirectoryResolver:
    """Runs laid out under one root, as the worker writes them: `root/<run_id>/final` and
    `root/<run_id>/checkpoints/step-000400` (or a plain `root/<run_id>/step-400`).

    `run:12` -> root/12/final, `run:12@400` -> root/12/checkpoints/step-000400. Each is a
    save_pretrained directory (config, weights, tokenizer) or a training checkpoint (model/ and
    tokenizer/). The worker points trainers at its runs through RLPLANE_RUNS_DIR.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def resolve(self, run_id: int, step: int | None) -> Path:
        run = self.root / str(run_id)
        if step is None:
            return run / "final"
        checkpoint, plain = run / CHECKPOINTS / step_dir_name(step), run / f"step-{step}"
        # neither there: the error names the layout the worker writes, not the plain one
        return plain if plain.is_dir() and not checkpoint.is_dir() else checkpoint


def default_resolver() -> RunResolver | None:
    """The resolver of RLPLANE_RUNS_DIR (set by the worker for its trainers), else None."""
    root = os.environ.get(RUNS_DIR_ENV)
    return DirectoryResolver(root) if root else None


def torch_dtype(dtype: DType) -> torch.dtype:
    """The spec's dtype as a torch dtype; auto is fp32 here (the backend casts to its precision)."""
    return _DTYPES.get(dtype, torch.float32)


def load_model(
    path: str,
    kind: ModelKind = "causal",
    *,
    resolver: RunResolver | None = None,
    dtype: DType = "auto",
    revision: str | None = None,
    trust_remote_code: bool = False,
    seed: int = 0,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load `path` (model.path syntax) as a `kind` model with its tokenizer; ModelError on failure."""
    if path.startswith("builtin:"):
        model, tokenizer = build_builtin(path.removeprefix("builtin:"), kind, seed)
        return model.to(torch_dtype(dtype)), tokenizer
    run_ref = parse_run_ref(path)
    if run_ref is not None:
        directory = _resolve_run(path, run_ref, resolver)
        return _load_pretrained(*_local_dirs(directory), kind, dtype, None, trust_remote_code, seed)
    local = Path(path).expanduser()
    if local.is_dir() and (local / NEMO_CONFIG).is_file():
        from trainer_core.models.megatron.nemo import nemo_as_hf_directory  # needs torch and transformers only

        converted = str(nemo_as_hf_directory(local))
        return _load_pretrained(converted, converted, kind, dtype, None, trust_remote_code, seed)
    if local.is_dir():
        return _load_pretrained(*_local_dirs(local), kind, dtype, None, trust_remote_code, seed)
    if path.startswith(_LOCAL_PREFIXES):
        raise ModelError(
            f"model directory {path!r} does not exist (resolved to {local.resolve()}); check model.path, "
            "or use a Hugging Face id, builtin:<name> or run:<id>."
        )
    try:
        return _load_pretrained(path, path, kind, dtype, revision, trust_remote_code, seed)
    except (OSError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise ModelError(
            f"unknown model {path!r}: not a builtin (available: {', '.join('builtin:' + n for n in builtin_names())}), "
            f"not a local directory, and it could not be loaded from the Hugging Face hub ({reason}). "
            "Check the spelling of model.path, the revision, and that the worker can reach the hub "
            "(HF_HUB_OFFLINE unset, HF_TOKEN for gated models)."
        ) from exc


def _resolve_run(path: str, run_ref: tuple[int, int | None], resolver: RunResolver | None) -> Path:
    resolver = resolver or default_resolver()
    if resolver is None:
        raise ModelError(
            f"model {path!r} refers to an earlier run, but this trainer does not know where runs are: "
            f"submit it to a server (its worker knows), or set {RUNS_DIR_ENV} to a directory of runs "
            "(<id>/final, <id>/checkpoints/step-NNNNNN), or use the run's local directory as the path."
        )
    directory = resolver.resolve(*run_ref)
    if not directory.is_dir():
        step = "its final model" if run_ref[1] is None else f"step {run_ref[1]}"
        raise ModelError(
            f"model {path!r}: no checkpoint directory for run {run_ref[0]} at {step} ({directory}); "
            "check that the run finished or saved that step, or pick another with run:<id>@<step>."
        )
    return directory


def _local_dirs(directory: Path) -> tuple[str, str]:
    """(model directory, tokenizer directory) of an export (one directory) or a training checkpoint
    (manifest.json beside model/ and tokenizer/), so `run:<id>@<step>` and a checkpoint path load."""
    model_dir = directory / "model"
    if not ((directory / MANIFEST).is_file() and model_dir.is_dir()):
        return str(directory), str(directory)
    if (model_dir / "adapter_config.json").is_file():
        raise ModelError(
            f"checkpoint {directory} holds a LoRA adapter, not a whole model; load the run's final export "
            "(the adapter merged into its base) or train on from it with --resume."
        )
    tokenizer_dir = directory / "tokenizer"
    return str(model_dir), str(tokenizer_dir if tokenizer_dir.is_dir() else model_dir)


def _load_pretrained(
    name: str,
    tokenizer_name: str,
    kind: ModelKind,
    dtype: DType,
    revision: str | None,
    trust_remote_code: bool,
    seed: int,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    common = {"revision": revision, "trust_remote_code": trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name, **common)
    if tokenizer.pad_token is None:
        # Batched training and scoring pad; eos is the usual stand-in (and is never a real label here).
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    config = AutoConfig.from_pretrained(name, **common)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # heads missing from the checkpoint (a score head on a causal run) start from seed
        if kind == "score":
            config = score_config(config, tokenizer.pad_token_id)
            model = AutoModelForSequenceClassification.from_pretrained(name, config=config, dtype=torch_dtype(dtype), **common)
        else:
            model = AutoModelForCausalLM.from_pretrained(name, config=config, dtype=torch_dtype(dtype), **common)
    return model, tokenizer
