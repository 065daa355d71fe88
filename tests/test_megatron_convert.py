"""HF <-> Megatron-Core weight conversion in one process: exact round trips through TP=2 shards,
megatron's layouts (grouped qkv, [gate; up] per shard, padded vocabulary), the on-disk cache and
the export that from_pretrained loads. tests/test_megatron_tp.py runs the converted weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPTNeoXConfig, LlamaConfig, PreTrainedModel

from trainer_core.models import ModelError, build_builtin
from trainer_core.models.builtin import model_from_config
from trainer_core.models.megatron import (
    CHECKPOINT_DIR_ENV,
    architecture_from_hf,
    cache_root,
    convert_to_cache,
    export_hf,
    hf_to_megatron,
    megatron_to_hf,
    shard,
    unshard,
)
from trainer_core.models.megatron import cache as cache_module

TP = 2


def odd_vocab(name: str) -> PreTrainedModel:
    """A builtin model's shape with 509 tokens, so the vocabulary needs padding; Llama untied->tied."""
    config = build_builtin(name)[0].config
    config.vocab_size = 509
    if isinstance(config, LlamaConfig):
        config.tie_word_embeddings = True
    return model_from_config(config, "causal", pad_token_id=0, seed=3).eval()


MODELS = {
    "tiny-gpt2": lambda: build_builtin("tiny-gpt2")[0],
    "tiny-llama": lambda: build_builtin("tiny-llama")[0],  # 4 heads, 2 key/value heads (GQA)
    "gpt2-vocab509": lambda: odd_vocab("tiny-gpt2"),
    "llama-vocab509-tied": lambda: odd_vocab("tiny-llama"),
}


def assert_same_weights(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(actual) == sorted(expected)
    different = [
        name for name in expected if actual[name].dtype != expected[name].dtype or not torch.equal(actual[name], expected[name])
    ]
    assert different == []


@pytest.mark.parametrize("name", sorted(MODELS))
def test_round_trip_through_tp_shards_is_bit_identical(name: str) -> None:
    model = MODELS[name]()
    arch = architecture_from_hf(model.config)
    original = model.state_dict()
    shards = [shard(hf_to_megatron(original, arch), arch, rank, TP) for rank in range(TP)]
    assert_same_weights(megatron_to_hf(unshard(shards, arch), arch), original)


def test_llama_shards_follow_megatron_layouts() -> None:
    """Checked against the HF weights directly, not through the inverse conversion."""
    model = odd_vocab("tiny-llama")  # 4 heads of 16, 2 kv heads, ffn 128, vocab 509 -> 512
    arch = architecture_from_hf(model.config)
    hf = model.state_dict()
    rank1 = shard(hf_to_megatron(hf, arch), arch, 1, TP)
    layer = "model.layers.0."

    # Rank 1 holds query group 1: q heads 2 and 3, then k head 1, then v head 1.
    q, k, v = (hf[f"{layer}self_attn.{p}_proj.weight"] for p in "qkv")
    assert torch.equal(rank1["decoder.layers.0.self_attention.linear_qkv.weight"], torch.cat([q[32:64], k[16:32], v[16:32]]))
    # SwiGLU: the second half of gate's rows, then the second half of up's.
    gate, up = hf[f"{layer}mlp.gate_proj.weight"], hf[f"{layer}mlp.up_proj.weight"]
    assert torch.equal(rank1["decoder.layers.0.mlp.linear_fc1.weight"], torch.cat([gate[64:], up[64:]]))
    # Row parallel: input columns split.
    assert torch.equal(rank1["decoder.layers.0.mlp.linear_fc2.weight"], hf[f"{layer}mlp.down_proj.weight"][:, 64:])
    # Vocabulary padded to a multiple of 128 * TP with zero rows, then split; tied: no output_layer.
    embedding = rank1["embedding.word_embeddings.weight"]
    assert arch.padded_vocab_size(TP) == 512 and embedding.shape == (256, 64)
    assert torch.equal(embedding[:253], hf["model.embed_tokens.weight"][256:]) and not embedding[253:].any()
    assert "output_layer.weight" not in rank1
    assert (arch.rotary_base, arch.normalization, arch.activation) == (10000.0, "RMSNorm", "swiglu")


def test_gpt2_qkv_is_regrouped_per_head_and_conv1d_transposed() -> None:
    model = build_builtin("tiny-gpt2")[0]
    arch = architecture_from_hf(model.config)
    c_attn = model.state_dict()["transformer.h.0.attn.c_attn.weight"]  # Conv1D [in 64, out 3 * 64]
    rank0 = shard(hf_to_megatron(model.state_dict(), arch), arch, 0, TP)
    q, k, v = c_attn.t().chunk(3)
    head = slice(16, 32)  # rank 0 holds heads 0 and 1, each as [q; k; v]
    expected = torch.cat([q[:16], k[:16], v[:16], q[head], k[head], v[head]])
    assert torch.equal(rank0["decoder.layers.0.self_attention.linear_qkv.weight"], expected)
    assert (arch.position_embedding_type, arch.activation, arch.tie_word_embeddings) == ("learned_absolute", "gelu_tanh", True)


def test_llama_rope_base_and_norm_eps_come_from_the_config() -> None:
    config = build_builtin("tiny-llama")[0].config
    config.rope_parameters = {"rope_type": "default", "rope_theta": 500000.0}  # Llama 3's base
    config.rms_norm_eps = 1e-6
    arch = architecture_from_hf(config)
    assert (arch.rotary_base, arch.norm_eps, arch.num_query_groups, arch.head_dim) == (500000.0, 1e-6, 2, 16)
    config.rope_parameters = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}
    with pytest.raises(ModelError, match="rope_type 'llama3'"):
        architecture_from_hf(config)


def test_tp_size_must_divide_heads_and_groups() -> None:
    arch = architecture_from_hf(build_builtin("tiny-llama")[0].config)
    with pytest.raises(ModelError, match="num_query_groups=2"):
        arch.check_tp_size(4)


def test_other_model_types_are_refused() -> None:
    with pytest.raises(ModelError, match="GPT-2 and Llama"):
        architecture_from_hf(GPTNeoXConfig(num_hidden_layers=1))


def test_conversion_is_cached_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = build_builtin("tiny-llama")
    first = convert_to_cache("builtin:tiny-llama", model, TP, tokenizer=tokenizer, root=tmp_path)
    files = sorted(first.directory.rglob("*"))
    stamps = {path: path.stat().st_mtime_ns for path in files}
    assert [p.name for p in files if p.suffix == ".safetensors"] == [
        "tp-rank-00-of-02.safetensors",
        "tp-rank-01-of-02.safetensors",
    ]

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again instead of reusing the cache")

    monkeypatch.setattr(cache_module, "hf_to_megatron", no_conversion)
    again = convert_to_cache("builtin:tiny-llama", model, TP, tokenizer=tokenizer, root=tmp_path)
    assert again == first
    assert {path: path.stat().st_mtime_ns for path in sorted(again.directory.rglob("*"))} == stamps
    assert not any(p.name.startswith(".tmp") for p in tmp_path.rglob("*"))  # staging removed by the rename

    # Changed weights under the same source name: a new fingerprint, a new directory.
    monkeypatch.undo()
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)
    changed = convert_to_cache("builtin:tiny-llama", model, TP, root=tmp_path)
    assert changed.fingerprint != first.fingerprint and changed.directory != first.directory
    # Another TP size of the same weights sits beside the first.
    one = convert_to_cache("builtin:tiny-llama", model, 1, root=tmp_path)
    assert one.directory.parent == changed.directory.parent and one.directory.name == "tp1-vocab128"


def test_cache_root_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CHECKPOINT_DIR_ENV, str(tmp_path / "explicit"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "explicit"
    monkeypatch.delenv(CHECKPOINT_DIR_ENV)
    assert cache_root() == tmp_path / "hf-home" / "rlplane" / "megatron"
    monkeypatch.delenv("HF_HOME")
    assert cache_root() == tmp_path / "home" / ".cache" / "huggingface" / "rlplane" / "megatron"

    monkeypatch.setenv(CHECKPOINT_DIR_ENV, str(tmp_path / "explicit"))
    model, _ = build_builtin("tiny-gpt2")
    converted = convert_to_cache("builtin:tiny-gpt2", model, TP)  # no root: the env var decides
    assert converted.directory.is_relative_to(tmp_path / "explicit")


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama"])
def test_export_from_cached_shards_loads_with_from_pretrained(name: str, tmp_path: Path) -> None:
    model, tokenizer = build_builtin(name)
    converted = convert_to_cache(f"builtin:{name}", model, TP, tokenizer=tokenizer, root=tmp_path / "cache")
    shards = [converted.load_shard(rank) for rank in range(TP)]
    out = export_hf(shards, converted, tmp_path / "export")

    reloaded = AutoModelForCausalLM.from_pretrained(out)
    assert type(reloaded) is type(model)
    assert_same_weights(reloaded.state_dict(), model.state_dict())
    assert AutoTokenizer.from_pretrained(out)("1+2=").input_ids == tokenizer("1+2=").input_ids
