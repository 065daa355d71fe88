"""An un-tarred NeMo checkpoint directory as model.path (trainer_core/models/megatron/nemo.py).

The directories here are written the way NeMo 1.x saves a megatron-core GPT model: model_config.yaml
and model_weights.ckpt (torch.save of the state dict, `model.`-prefixed, Transformer Engine's fused
norm names, `_extra_state` as io.BytesIO), one file per TP rank under mp_rank_NN/ or per TP and PP rank
under tp_rank_NN_pp_rank_NNN/ (local layer numbers per stage). They are built from the builtin models'
weights, so the loaded model must compute exactly what the builtin one does. NeMo itself is not
installed (docs/backends.md says why); the layout follows its save/restore connector and converters.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
import yaml

from tests.harness.training import metrics, run_spec
from trainer_core.models import ModelError, build_builtin, load_model
from trainer_core.models.megatron import architecture_from_hf, hf_to_megatron, shard

TE_NAMES = {
    ".input_layernorm.weight": ".self_attention.linear_qkv.layer_norm_weight",
    ".input_layernorm.bias": ".self_attention.linear_qkv.layer_norm_bias",
    ".pre_mlp_layernorm.weight": ".mlp.linear_fc1.layer_norm_weight",
    ".pre_mlp_layernorm.bias": ".mlp.linear_fc1.layer_norm_bias",
}
# The settings of each kind of model; the sizes come from the builtin model (write_nemo).
LLAMA = {
    "mcore_gpt": True, "kv_channels": None, "normalization": "rmsnorm", "activation": "fast-swiglu", "bias": False,
    "position_embedding_type": "rope", "rotary_base": 10000, "share_embeddings_and_output_weights": False,
    "make_vocab_size_divisible_by": 128, "transformer_block_type": "pre_ln", "rotary_percentage": 1.0,
    "tokenizer": {"library": "huggingface", "type": None},
}  # fmt: skip
GPT2 = {
    **LLAMA, "normalization": "layernorm", "activation": "gelu",
    "openai_gelu": True, "bias": True, "position_embedding_type": "learned_absolute", "share_embeddings_and_output_weights": True,
}  # fmt: skip


def nemo_names(weights: dict[str, torch.Tensor]) -> dict[str, object]:
    """Local-spec megatron weights -> NeMo's saved names, with an extra-state entry per layer as TE writes it."""
    out: dict[str, object] = {}
    for name, tensor in weights.items():
        for local, te in TE_NAMES.items():
            if name.endswith(local):
                name = name[: -len(local)] + te
        out[f"model.{name}"] = tensor
        if name.endswith("linear_proj.weight"):
            out[f"model.{name.removesuffix('weight')}_extra_state"] = io.BytesIO(b"fp8 metadata")
    return out


def write_nemo(directory: Path, name: str, config: dict, tp: int = 1, pp: int = 1) -> torch.nn.Module:
    """The builtin model `name` as a NeMo checkpoint directory of `tp` x `pp` ranks; returns the HF model."""
    hf, tokenizer = build_builtin(name)
    arch = architecture_from_hf(hf.config)
    weights = hf_to_megatron(hf.state_dict(), arch)
    per_stage = arch.num_layers // pp
    for p in range(pp):
        stage = {}
        for key, tensor in weights.items():
            if key.startswith("decoder.layers."):
                layer = int(key.split(".")[2])
                if layer // per_stage == p:
                    stage[f"decoder.layers.{layer % per_stage}.{key.split('.', 3)[3]}"] = tensor
            elif key.startswith("embedding.") and p == 0 or not key.startswith("embedding.") and p == pp - 1:
                stage[key] = tensor
        for t in range(tp):
            folder = directory / (f"tp_rank_{t:02d}_pp_rank_{p:03d}" if pp > 1 else f"mp_rank_{t:02d}" if tp > 1 else ".")
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(nemo_names(shard(stage, arch, t, tp)), folder / "model_weights.ckpt")
    sizes = {
        "num_layers": arch.num_layers, "hidden_size": arch.hidden_size, "ffn_hidden_size": arch.ffn_hidden_size,
        "num_attention_heads": arch.num_attention_heads, "num_query_groups": arch.num_query_groups,
        "encoder_seq_length": arch.max_position_embeddings, "max_position_embeddings": arch.max_position_embeddings,
        "layernorm_epsilon": arch.norm_eps, "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
    }  # fmt: skip
    config = {**sizes, **config}
    (directory / "model_config.yaml").write_text(yaml.safe_dump(config))
    tokenizer.save_pretrained(directory / "tokenizer")
    return hf


def logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([[5, 17, 3, 9, 11, 2, 8], [7, 7, 1, 30, 2, 4, 6]])
    with torch.no_grad():
        return model(input_ids=ids).logits[..., :512]


@pytest.fixture(autouse=True)
def converted_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLPLANE_MEGATRON_CHECKPOINT_DIR", str(tmp_path / "converted"))
    return tmp_path / "converted"


@pytest.mark.parametrize(
    ("name", "config", "tp", "pp"),
    [("tiny-llama", LLAMA, 2, 2), ("tiny-llama", LLAMA, 1, 1), ("tiny-gpt2", GPT2, 2, 1)],
    ids=["llama-tp2-pp2", "llama-one-file", "gpt2-tp2"],
)
def test_a_nemo_directory_loads_as_the_model_it_holds(tmp_path: Path, converted_cache: Path, name, config, tp, pp) -> None:
    """Joined over TP and PP, renamed, converted: the same logits (bit for bit) and the same tokenizer."""
    expected = write_nemo(tmp_path / "nemo", name, config, tp, pp)
    model, tokenizer = load_model(str(tmp_path / "nemo"))
    assert model.config.model_type == expected.config.model_type
    assert torch.equal(logits(model), logits(expected))
    assert tokenizer.pad_token_id == build_builtin(name)[1].pad_token_id
    (converted,) = (converted_cache / "nemo").iterdir()
    assert (converted / "config.json").is_file() and (converted / "tokenizer.json").is_file()
    load_model(str(tmp_path / "nemo"))  # converted once, reused
    assert len(list((converted_cache / "nemo").iterdir())) == 1


def test_sft_trains_from_a_nemo_directory_on_the_megatron_backend(tmp_path: Path) -> None:
    write_nemo(tmp_path / "nemo", "tiny-llama", LLAMA, 2, 1)
    spec = {
        "name": "sft-from-nemo",
        "algorithm": "sft",
        "model": {"path": str(tmp_path / "nemo"), "max_seq_len": 32},
        "data": {"source": "builtin:arithmetic", "eval_fraction": 0.0},
        "backend": {"kind": "megatron", "precision": "fp32"},
        "train": {"steps": 6, "batch_size": 8, "lr": 3e-3, "log_every": 1},
    }
    run_spec(tmp_path / "spec.yaml", spec, "--out", str(tmp_path / "out"))
    loss = metrics(tmp_path / "out", "train/loss")
    assert sorted(loss) == list(range(1, 7)) and loss[6] < loss[1]


def refusal(tmp_path: Path, **changes: object) -> str:
    write_nemo(tmp_path / "nemo", "tiny-llama", {**LLAMA, **changes})
    with pytest.raises(ModelError) as error:
        load_model(str(tmp_path / "nemo"))
    return str(error.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mcore_gpt": False}, "mcore_gpt: false is not supported"),
        ({"activation": "squared-relu"}, "activation: squared-relu is not supported"),
        ({"normalization": "layernorm1p"}, "normalization: layernorm1p is not supported"),
        ({"position_embedding_type": "learned_absolute"}, "position_embedding_type learned_absolute, normalization RMSNorm"),
        ({"rotary_percentage": 0.5}, "rotary_percentage: 0.5 is not supported"),
    ],
)
def test_what_converts_to_neither_gpt2_nor_llama_is_refused(tmp_path: Path, changes: dict, message: str) -> None:
    text = refusal(tmp_path, **changes)
    assert message in text and "export the model to Hugging Face with NeMo first" in text


class Callback:
    """What a pickle may hold beside tensors: any object, whose loading runs its class's code."""


def test_the_distributed_format_and_pickled_objects_are_refused(tmp_path: Path) -> None:
    write_nemo(tmp_path / "nemo", "tiny-llama", LLAMA)
    (tmp_path / "nemo" / "model_weights").mkdir()
    with pytest.raises(ModelError, match=r"model_weights is NeMo's distributed \(torch_dist\) format"):
        load_model(str(tmp_path / "nemo"))
    (tmp_path / "nemo" / "model_weights").rmdir()
    with torch.serialization.safe_globals([io.BytesIO]):
        state = torch.load(tmp_path / "nemo" / "model_weights.ckpt", weights_only=True)
    state["callback"] = Callback()  # an arbitrary object: weights_only refuses to build it
    torch.save(state, tmp_path / "nemo" / "model_weights.ckpt")
    with pytest.raises(ModelError, match="holds objects other than tensors, which rlplane does not load"):
        load_model(str(tmp_path / "nemo"))


def test_a_missing_tokenizer_names_the_fix(tmp_path: Path) -> None:
    write_nemo(tmp_path / "nemo", "tiny-gpt2", GPT2)
    for path in sorted((tmp_path / "nemo" / "tokenizer").iterdir()):
        path.unlink()
    with pytest.raises(ModelError, match=r"has no Hugging Face tokenizer: save one into .*tokenizer"):
        load_model(str(tmp_path / "nemo"))
