"""Full-state training checkpoints in safetensors + JSON (never pickle), written atomically.

`save_checkpoint` / `load_checkpoint` round-trip weights, optimizer, LR scheduler, RNG and the
data position exactly, so a resumed run continues bit-identically; `export_model` writes a plain
Hugging Face directory (LoRA merged).
"""

from trainer_core.checkpoint.errors import CheckpointError
from trainer_core.checkpoint.files import verify
from trainer_core.checkpoint.store import (
    CheckpointInfo,
    TrainState,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    rotate,
    save_checkpoint,
)
from trainer_core.checkpoint.weights import export_model

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "TrainState",
    "export_model",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "rotate",
    "save_checkpoint",
    "verify",
]
