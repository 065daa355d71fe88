"""Models and tokenizers for the trainer: builtin tiny models, loading by `model.path`, LoRA.

Imports torch and transformers; the torch-free parts of trainer_core never import this package.
"""

from trainer_core.models.builtin import BUILTIN_MODELS, ModelKind, build_builtin, builtin_names
from trainer_core.models.errors import ModelError
from trainer_core.models.from_spec import load_from_spec
from trainer_core.models.loading import DirectoryResolver, RunResolver, load_model, torch_dtype
from trainer_core.models.lora import DEFAULT_TARGET_MODULES, apply_lora
from trainer_core.models.tokenizer import CHAT_TEMPLATE, build_tokenizer

__all__ = [
    "BUILTIN_MODELS",
    "CHAT_TEMPLATE",
    "DEFAULT_TARGET_MODULES",
    "DirectoryResolver",
    "ModelError",
    "ModelKind",
    "RunResolver",
    "apply_lora",
    "build_builtin",
    "build_tokenizer",
    "builtin_names",
    "load_from_spec",
    "load_model",
    "torch_dtype",
]
