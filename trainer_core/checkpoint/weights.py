"""Model weights in Hugging Face format: save, load in place, export a plain HF directory.

PEFT models keep only their adapter (adapter_model.safetensors, the PEFT way); the base model is
rebuilt from the spec on resume. Tied weights (GPT-2's lm_head and wte share one tensor) are
written once by save_pretrained and filled through the shared tensor on load.
"""

from __future__ import annotations

import copy
import json
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.files import fsync_path, fsync_tree, write_manifest

SAFETENSORS_INDEX = "model.safetensors.index.json"
ADAPTER_FILE = "adapter_model.safetensors"


def is_peft_model(model: torch.nn.Module) -> bool:
    if "peft" not in sys.modules:  # never imported, so no model is one (importing it costs a run ~0.3 s)
        return False
    from peft import PeftModel

    return isinstance(model, PeftModel)


def save_weights(model: Any, directory: Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """HF save_pretrained: safetensors only (transformers 5 and PEFT write nothing else). `state_dict`:
    the model's weights gathered by a sharding backend, written in place of the model's own."""
    if state_dict is None:
        model.save_pretrained(str(directory))
    else:
        model.save_pretrained(str(directory), state_dict=state_dict)


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The full-precision tensors of a checkpoint's (or export's) model/ directory, by state-dict key."""
    return _read_safetensors_dir(directory)


def _read_safetensors_dir(directory: Path) -> dict[str, torch.Tensor]:
    index = directory / SAFETENSORS_INDEX
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return {key: value for shard in shards for key, value in load_file(str(directory / shard)).items()}
    single = directory / "model.safetensors"
    if not single.exists():
        raise CheckpointError(f"no model.safetensors or {SAFETENSORS_INDEX} in {directory}; was it saved by save_checkpoint?")
    return load_file(str(single))


def load_weights(model: Any, directory: Path) -> None:
    """Copy the saved weights into `model`'s existing tensors (optimizer references stay valid)."""
    if is_peft_model(model):
        _load_adapter(model, directory)
        return
    if (directory / ADAPTER_FILE).exists():
        raise CheckpointError(f"{directory} holds a LoRA adapter; load it into a PEFT model (apply_lora first).")
    saved = _read_safetensors_dir(directory)
    expected = model.state_dict()
    unexpected = sorted(set(saved) - set(expected))
    if unexpected:
        raise CheckpointError(
            f"checkpoint weights {unexpected[:5]} have no place in {type(model).__name__}; "
            "build the model from the same spec as the run that saved it."
        )
    missing = set(expected) - set(saved)
    # A tensor left out because it is tied to a saved one is filled through the shared storage.
    saved_ptrs = {expected[key].data_ptr() for key in saved}
    untied = sorted(key for key in missing if expected[key].data_ptr() not in saved_ptrs)
    if untied:
        raise CheckpointError(
            f"checkpoint lacks weights {untied[:5]}; build the model from the same spec as the run that saved it."
        )
    with torch.no_grad():
        for key, value in saved.items():
            target = expected[key]
            if target.shape != value.shape:
                raise CheckpointError(
                    f"weight {key!r} has shape {tuple(value.shape)} in the checkpoint, {tuple(target.shape)} here."
                )
            target.copy_(value)


def _load_adapter(model: Any, directory: Path) -> None:
    from peft import set_peft_model_state_dict

    path = directory / ADAPTER_FILE
    if not path.exists():
        raise CheckpointError(f"{path} is missing: this checkpoint holds full weights, not a LoRA adapter.")
    result = set_peft_model_state_dict(model, load_file(str(path)))
    if result.unexpected_keys:
        raise CheckpointError(f"adapter weights {result.unexpected_keys[:5]} do not fit the model; use the same LoRA settings.")


def export_model(
    model: Any,
    tokenizer: Any,
    out_dir: Path,
    *,
    replace: bool = False,
    step: int | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
) -> Path:
    """A plain HF directory for `from_pretrained`: LoRA merged into a copy, the live model untouched.
    `state_dict`: the weights a sharding backend gathered (Backend.full_state), saved in place of the model's.

    Written to a temporary sibling and renamed, so `out_dir` is either absent or whole. With
    `replace`, an existing export is swapped out only once the new one is complete (a resumed run
    exports again). With `step`, a manifest.json (every file's size and sha256) is written too, so
    the export can be registered and verified like a checkpoint.
    """
    out_dir = Path(out_dir)
    if not replace and out_dir.exists() and any(out_dir.iterdir()):
        raise CheckpointError(f"export directory {out_dir} is not empty; pick a new directory or delete it first.")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    plain = copy.deepcopy(model).merge_and_unload() if is_peft_model(model) else model
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{secrets.token_hex(4)}"
    try:
        save_weights(plain, tmp, state_dict=None if is_peft_model(model) else state_dict)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        fsync_tree(tmp)
        if step is not None:
            write_manifest(tmp, step)
        old = out_dir.parent / f".{out_dir.name}.old-{secrets.token_hex(4)}"
        if out_dir.exists():
            out_dir.rename(old)
        tmp.rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)
        fsync_path(out_dir.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
