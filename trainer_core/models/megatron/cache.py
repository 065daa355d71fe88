"""Converted Megatron weights on disk, reused across runs: one directory per source, weights and TP size.

    <root>/<source>-<fingerprint>/tp<N>-vocab<D>/
        megatron.json                     what the shards are (architecture, TP size, file names)
        tp-rank-00-of-02.safetensors      rank 0's GPTModel weights, ...
        hf/config.json (+ tokenizer)      the source's config and tokenizer, for export back to HF

<root> is RLPLANE_MEGATRON_CHECKPOINT_DIR, else $HF_HOME/rlplane/megatron, else
~/.cache/huggingface/rlplane/megatron (the order NeMo RL uses). The fingerprint hashes the config and
every weight's bytes, so a model retrained in place under the same path converts afresh. A directory
appears complete or not at all: it is written under a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

from trainer_core.models.megatron.config import DEFAULT_VOCAB_DIVISOR, Architecture, architecture_from_hf
from trainer_core.models.megatron.convert import StateDict, hf_to_megatron
from trainer_core.models.megatron.sharding import shard

CHECKPOINT_DIR_ENV = "RLPLANE_MEGATRON_CHECKPOINT_DIR"
MANIFEST = "megatron.json"
FORMAT = "rlplane-megatron/1"
HF_SUBDIR = "hf"


def cache_root() -> Path:
    """Where converted checkpoints live (see the module docstring for the order)."""
    if explicit := os.environ.get(CHECKPOINT_DIR_ENV):
        return Path(explicit).expanduser()
    hf_home = os.environ.get("HF_HOME")
    base = Path(hf_home).expanduser() if hf_home else Path.home() / ".cache" / "huggingface"
    return base / "rlplane" / "megatron"


def fingerprint(config: PretrainedConfig, state_dict: StateDict) -> str:
    """sha256 over the config and every weight's name, dtype, shape and bytes."""
    digest = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True, default=str).encode())
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy())  # raw bytes: bf16 has no numpy dtype
    return digest.hexdigest()


@dataclass(frozen=True)
class ConvertedCheckpoint:
    """One converted directory; `load_shard(rank)` gives what `model.load_shard` expects."""

    directory: Path
    source: str
    fingerprint: str
    tp_size: int
    arch: Architecture

    @property
    def hf_dir(self) -> Path:
        return self.directory / HF_SUBDIR

    def shard_path(self, tp_rank: int) -> Path:
        return self.directory / shard_file_name(tp_rank, self.tp_size)

    def load_shard(self, tp_rank: int) -> StateDict:
        return load_file(self.shard_path(tp_rank))


def shard_file_name(tp_rank: int, tp_size: int) -> str:
    return f"tp-rank-{tp_rank:02d}-of-{tp_size:02d}.safetensors"


def open_converted(directory: Path) -> ConvertedCheckpoint:
    """Read a converted directory's manifest; ValueError when it is not one."""
    manifest = json.loads((directory / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{directory / MANIFEST} has format {manifest.get('format')!r}, expected {FORMAT!r}; "
            "delete the directory to convert again."
        )
    return ConvertedCheckpoint(
        directory=directory,
        source=manifest["source"],
        fingerprint=manifest["fingerprint"],
        tp_size=manifest["tp_size"],
        arch=Architecture.from_json(manifest["architecture"]),
    )


def converted_dir(source: str, digest: str, tp_size: int, vocab_divisor: int, root: Path | None = None) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", source).strip("_.")[-80:] or "model"
    return (root or cache_root()) / f"{slug}-{digest[:16]}" / f"tp{tp_size}-vocab{vocab_divisor}"


def convert_to_cache(
    source: str,
    model: PreTrainedModel,
    tp_size: int,
    *,
    tokenizer: PreTrainedTokenizerBase | None = None,
    root: Path | None = None,
    vocab_divisor: int = DEFAULT_VOCAB_DIVISOR,
) -> ConvertedCheckpoint:
    """The converted checkpoint of `model` (loaded from `source`, e.g. a model.path) for `tp_size`
    ranks: reused when this source, weights and TP size were converted before, else written.

    Call it on one process (e.g. global rank 0, then a barrier): two processes converting the same
    model at once both succeed, but do the work twice.
    """
    arch = architecture_from_hf(model.config, vocab_divisor)
    arch.check_tp_size(tp_size)
    state_dict = model.state_dict()
    digest = fingerprint(model.config, state_dict)
    final = converted_dir(source, digest, tp_size, vocab_divisor, root)
    if (final / MANIFEST).is_file():
        return open_converted(final)

    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    try:
        _write(staging, source, digest, arch, tp_size, hf_to_megatron(state_dict, arch), model.config, tokenizer)
        try:
            staging.rename(final)
        except OSError:
            if not (final / MANIFEST).is_file():  # not a lost race with another converter: a real error
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return open_converted(final)


def _write(
    directory: Path,
    source: str,
    digest: str,
    arch: Architecture,
    tp_size: int,
    weights: StateDict,
    config: PretrainedConfig,
    tokenizer: PreTrainedTokenizerBase | None,
) -> None:
    directory.mkdir()
    files = []
    for rank in range(tp_size):
        files.append(shard_file_name(rank, tp_size))
        save_file(shard(weights, arch, rank, tp_size), directory / files[-1], metadata={"format": "pt"})
    config.save_pretrained(directory / HF_SUBDIR)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory / HF_SUBDIR)
    manifest = {
        "format": FORMAT,
        "source": source,
        "fingerprint": digest,
        "tp_size": tp_size,
        "megatron_core": version("megatron-core"),
        "architecture": arch.to_json(),
        "shards": files,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
