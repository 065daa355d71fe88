"""Save, load, list and rotate full-state checkpoints in a run directory.

Layout of `<run_dir>/step-000100/`:
  model/ (HF save_pretrained: safetensors + config, or a PEFT adapter), tokenizer/,
  optimizer.{json,safetensors}, scheduler.json, rng.{json,safetensors} (rank zero's generators;
  rng-ranks.safetensors: every data-parallel rank's, rank_rng.py), trainer_state.json,
  modules/<name>.safetensors for modules beside the model (a value head, a critic, Q heads),
  manifest.json (written last).
A backend that shards checkpoints writes its shards in place of optimizer.*: fsdp2 dcp/ (sharded.py),
megatron megatron/ (megatron/dist_checkpoint.py): every rank's shards of the model and optimizer, what a
resume reads; model/ and modules/ are still written,
gathered, for readers that want a plain Hugging Face model (`run:<id>@<step>`).
Each is built in `.step-000100.tmp-<random>` (`stage`; all ranks write their shards there),
fsynced, then renamed into place by rank zero, so a crash never leaves a directory that looks complete.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from rlplane.layout import rotated, step_dir_name, step_of
from trainer_core.checkpoint import files, rank_rng, state
from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.sharded import foreign_sharded_state, sharded_state_kind
from trainer_core.checkpoint.weights import load_weights, save_weights

_TMP_DIR = re.compile(r"^\.step-\d+\.tmp-")


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    step: int
    size: int  # bytes, manifest included
    sha256: str  # of manifest.json, which pins every file's hash


@dataclass(frozen=True)
class TrainState:
    step: int
    data_position: dict[str, Any]
    spec: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


def staging_dir(run_dir: Path, step: int, token: str) -> Path:
    """Where `step`'s checkpoint is built before it is renamed into place (`token` tells attempts apart)."""
    return Path(run_dir) / f".{step_dir_name(step)}.tmp-{token}"


def stage(run_dir: Path, step: int, token: str | None = None) -> Path:
    """Create the empty staging directory of a new checkpoint for `step` and return it."""
    run_dir = Path(run_dir)
    final = run_dir / step_dir_name(step)
    if final.exists():
        raise CheckpointError(f"checkpoint {final} already exists; delete it or save under another step.")
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(run_dir, step, token or secrets.token_hex(4))
    tmp.mkdir()
    return tmp


def _json_field(name: str, value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{name} must be plain JSON (dicts, lists, strings, finite numbers): {exc}") from exc


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any | None,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any | None,
    data_position: dict[str, Any],
    spec: dict[str, Any],
    extra: dict[str, Any] | None = None,
    modules: dict[str, torch.nn.Module] | None = None,
    model_state: dict[str, torch.Tensor] | None = None,
    module_states: dict[str, dict[str, torch.Tensor]] | None = None,
    optimizer_state: dict[str, Any] | None = None,
    staged: Path | None = None,
    elsewhere: dict[str, dict[str, Any]] | None = None,
    rank_rngs: dict[int, dict[str, torch.Tensor]] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> CheckpointInfo:
    """Write the full training state for `step` atomically and return where it went.

    `extra` is plain JSON (e.g. a KL controller's coefficient); `modules` are trained modules that
    are not part of the HF model (a value head, a critic, Q heads), saved by name. `model_state`,
    `module_states` and `optimizer_state` replace what `model`, `modules` and `optimizer` hold when
    a sharding backend gathered them (Backend.full_state). `staged`: the directory from `stage` into
    which every rank already wrote its shards (dcp/); it is completed and renamed like a new one.
    `elsewhere`: the listing (size, sha256) of shards other nodes wrote and upload themselves (rlplane/node_parts.py), which
    the manifest lists too.
    `rank_rngs`: every data-parallel rank's generators (rank_rng.py), written beside rank zero's own.
    `before_commit` runs just before the checkpoint is renamed into place; what it raises discards it.
    """
    if step < 0:
        raise CheckpointError(f"step must be >= 0, got {step}.")
    trainer_state = {
        "format_version": files.FORMAT_VERSION,
        "step": step,
        "data_position": _json_field("data_position", data_position),
        "spec": _json_field("spec", spec),
        "extra": _json_field("extra", extra or {}),
        "created_at": datetime.now(UTC).isoformat(),
    }
    run_dir = Path(run_dir)
    final = run_dir / step_dir_name(step)
    tmp = stage(run_dir, step) if staged is None else Path(staged)
    try:
        state.save_rng(tmp)  # first, so nothing below can move the generators before they are recorded
        rank_rng.save_rank_rngs(tmp, rank_rngs or {})
        save_weights(model, tmp / "model", state_dict=model_state)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp / "tokenizer"))
        if optimizer_state is not None:
            state.save_state(tmp, "optimizer", optimizer_state)
        elif optimizer is not None:
            state.save_optimizer(tmp, optimizer)
        if scheduler is not None:
            state.save_scheduler(tmp, scheduler)
        for name, module in (modules or {}).items():
            _save_module(tmp / "modules", name, module, (module_states or {}).get(name))
        files.write_json(tmp / "trainer_state.json", trainer_state)
        files.fsync_tree(tmp)
        files.write_manifest(tmp, step, elsewhere)
        files.fsync_path(tmp)
        if before_commit is not None:
            before_commit()
        tmp.rename(final)
        files.fsync_path(run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    digest, size = files.manifest_digest_and_size(final)
    return CheckpointInfo(path=final, step=step, size=size, sha256=digest)


def load_checkpoint(
    path: Path,
    *,
    model: Any,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    restore_rng: bool = True,
    verify_hashes: bool = False,
    modules: dict[str, torch.nn.Module] | None = None,
) -> TrainState:
    """Load weights into `model` (and `modules`, by name) in place, then optimizer, scheduler and RNG;
    return the run position."""
    path = Path(path)
    train_state = read_train_state(path, verify_hashes=verify_hashes)
    load_weights(model, path / "model")
    for name, module in (modules or {}).items():
        _load_module(path / "modules", name, module)
    if optimizer is not None:
        kind = sharded_state_kind(path)
        if kind is not None and not (path / "optimizer.json").exists():
            reason = foreign_sharded_state(path, kind, "load_checkpoint")
            raise CheckpointError(f"{reason} (Or load the weights alone: optimizer=None.)")
        state.load_optimizer(path, optimizer)  # before the scheduler: it restores each group's lr
    if scheduler is not None:
        state.load_scheduler(path, scheduler)
    if restore_rng:
        state.load_rng(path)
    return train_state


def read_train_state(path: Path, *, verify_hashes: bool = False) -> TrainState:
    """The run position a complete checkpoint records, without loading any of its state."""
    path = Path(path)
    complete = files.verify(path) if verify_hashes else files.is_complete(path)
    if not complete:
        raise CheckpointError(
            f"{path} is not a complete checkpoint (manifest missing or files damaged); "
            "resume from latest_checkpoint(run_dir) instead."
        )
    trainer_state = files.read_json(path / "trainer_state.json")
    return TrainState(
        step=trainer_state["step"],
        data_position=trainer_state["data_position"],
        spec=trainer_state["spec"],
        extra=trainer_state.get("extra", {}),
    )


_MODULE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _save_module(root: Path, name: str, module: torch.nn.Module, state_dict: dict[str, torch.Tensor] | None = None) -> None:
    if not _MODULE_NAME.match(name):
        raise CheckpointError(f"module name {name!r} must be letters, digits, '_', '.' or '-'.")
    root.mkdir(exist_ok=True)
    tensors = module.state_dict() if state_dict is None else state_dict
    # clone: tied or shared tensors would otherwise make safetensors refuse the dict.
    files.write_tensors(root / f"{name}.safetensors", {k: v.detach().clone() for k, v in tensors.items()})


def _load_module(root: Path, name: str, module: torch.nn.Module) -> None:
    path = root / f"{name}.safetensors"
    if not path.exists():
        raise CheckpointError(f"{path} is missing: the checkpoint was saved without the {name} module.")
    saved = files.read_tensors(path)
    expected = module.state_dict()
    if saved.keys() != expected.keys() or any(saved[k].shape != expected[k].shape for k in saved):
        raise CheckpointError(f"the {name} module in {path} does not fit this run's {name}; resume with the same spec.")
    with torch.no_grad():
        for key, value in saved.items():
            expected[key].copy_(value)


def _step_of(path: Path) -> int | None:
    return step_of(path.name)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints in `run_dir`, oldest step first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(step, path) for path in run_dir.iterdir() if (step := _step_of(path)) is not None and path.is_dir()]
    return [path for _, path in sorted(found) if files.is_complete(path)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    checkpoints = list_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


def rotate(run_dir: Path, keep_last: int) -> list[Path]:
    """Delete complete checkpoints older than the newest `keep_last`, and leftover temporary dirs."""
    if keep_last < 1:
        raise CheckpointError(f"keep_last must be >= 1 (got {keep_last}); rotating to zero would delete the resume point.")
    run_dir = Path(run_dir)
    complete = {_step_of(path): path for path in list_checkpoints(run_dir)}
    doomed = [complete[step] for step in rotated(complete, keep_last)]
    if run_dir.is_dir():
        doomed += [path for path in run_dir.iterdir() if _TMP_DIR.match(path.name) and path.is_dir()]
    for path in doomed:
        shutil.rmtree(path)
    return doomed
