"""trainer_core.models: the builtin tokenizer and tiny models, loading by model.path, LoRA (CPU, offline)."""

import time
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from transformers import AutoTokenizer

from rlplane.spec.sections import LoraSpec, ModelSpec
from trainer_core.models import (
    DirectoryResolver,
    ModelError,
    apply_lora,
    build_builtin,
    build_tokenizer,
    load_from_spec,
    load_model,
)
from trainer_core.models import tokenizer as tokenizer_module

BUILTINS = ["tiny-gpt2", "tiny-llama"]
TEXTS = ["12+7=19", "What is 3*4? The answer is 12."]


@pytest.fixture
def offline(monkeypatch):
    """No hub here: make every hub lookup fail at once instead of trying the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def batch(tokenizer):
    return tokenizer(TEXTS, padding=True, return_tensors="pt")


def save(model, tokenizer, directory: Path) -> Path:
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# --- tokenizer ---


def test_tokenizer_is_deterministic():
    first = build_tokenizer()
    tokenizer_module._trained_json.cache_clear()  # train again from scratch
    second = build_tokenizer()
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    assert len(first) == 512
    assert [first.pad_token_id, first.bos_token_id, first.eos_token_id, first.unk_token_id] == [0, 1, 2, 3]


def test_digits_are_single_tokens_and_text_round_trips():
    tokenizer = build_tokenizer()
    assert tokenizer.tokenize("12+7=19") == ["1", "2", "+", "7", "=", "1", "9"]
    ids = tokenizer("Hello, world! 144/12=12")["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == "Hello, world! 144/12=12"


def test_chat_template_and_generation_prompt():
    tokenizer = build_tokenizer()
    messages = [{"role": "user", "content": "3+4="}, {"role": "assistant", "content": "7"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == "<s><|user|>3+4=</s><|assistant|>7</s>"
    prompt = tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<s><|user|>3+4=</s><|assistant|>"
    assert tokenizer.apply_chat_template(messages[:1], tokenize=False) == "<s><|user|>3+4=</s>"


def test_tokenizer_save_and_load_offline(tmp_path, offline):
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    assert loaded.pad_token == "<pad>" and loaded.chat_template == tokenizer.chat_template


# --- builtin models ---


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_forward_causal_and_score(name):
    model, tokenizer = build_builtin(name)
    inputs = batch(tokenizer)
    assert model.config.vocab_size == len(tokenizer)
    assert model(**inputs).logits.shape == (2, inputs["input_ids"].shape[1], len(tokenizer))
    scorer, _ = build_builtin(name, kind="score")
    assert scorer.config.pad_token_id == tokenizer.pad_token_id
    assert scorer(**inputs).logits.shape == (2, 1)


@pytest.mark.parametrize("kind", ["causal", "score"])
def test_builtin_weights_follow_the_seed(kind):
    a, _ = build_builtin("tiny-llama", kind, seed=1)
    b, _ = build_builtin("tiny-llama", kind, seed=1)
    c, _ = build_builtin("tiny-llama", kind, seed=2)
    assert same_weights(a, b)
    assert not same_weights(a, c)


def test_unknown_builtin_lists_the_available_ones():
    with pytest.raises(ModelError, match="tiny-gpt2, tiny-llama"):
        load_model("builtin:tiny-gpt3")


def test_builtin_dtype():
    model, _ = load_model("builtin:tiny-gpt2", dtype="bf16")
    assert model.dtype == torch.bfloat16


# --- loading from directories and runs ---


@pytest.mark.parametrize("name", BUILTINS)
def test_local_directory_gives_identical_logits(tmp_path, offline, name):
    model, tokenizer = build_builtin(name)
    directory = save(model, tokenizer, tmp_path / name)
    loaded, loaded_tokenizer = load_model(str(directory))
    inputs = batch(tokenizer)
    assert loaded_tokenizer(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    assert torch.equal(loaded(**inputs).logits, model(**inputs).logits)


@pytest.mark.parametrize("name", BUILTINS)
def test_causal_directory_loads_as_score_model(tmp_path, offline, name):
    model, tokenizer = build_builtin(name)
    directory = save(model, tokenizer, tmp_path / name)
    scorer, _ = load_model(str(directory), kind="score", seed=3)
    again, _ = load_model(str(directory), kind="score", seed=3)
    assert scorer.config.num_labels == 1 and scorer.config.pad_token_id == tokenizer.pad_token_id
    assert scorer(**batch(tokenizer)).logits.shape == (2, 1)
    assert same_weights(scorer, again)  # the new head is seeded too
    body = next(p for n, p in model.named_parameters() if "embed_tokens" in n or "wte" in n)
    assert any(torch.equal(body, p) for p in scorer.parameters())  # the body kept its trained weights


def test_run_reference_through_directory_resolver(tmp_path, offline):
    final, tokenizer = build_builtin("tiny-gpt2", seed=1)
    step, _ = build_builtin("tiny-gpt2", seed=2)
    save(final, tokenizer, tmp_path / "12" / "final")
    save(step, tokenizer, tmp_path / "12" / "step-400")
    resolver = DirectoryResolver(tmp_path)
    assert same_weights(load_model("run:12", resolver=resolver)[0], final)
    assert same_weights(load_model("run:12@400", resolver=resolver)[0], step)
    with pytest.raises(ModelError, match=r"run 12 at step 500"):
        load_model("run:12@500", resolver=resolver)
    with pytest.raises(ModelError, match="RLPLANE_RUNS_DIR"):
        load_model("run:12")


def test_run_reference_through_the_workers_runs_dir(tmp_path, offline, monkeypatch):
    """The worker's layout (runs/<id>/final, runs/<id>/checkpoints/step-000400), found through
    RLPLANE_RUNS_DIR, which the worker sets for its trainers."""
    final, tokenizer = build_builtin("tiny-gpt2", seed=1)
    step, _ = build_builtin("tiny-gpt2", seed=2)
    save(final, tokenizer, tmp_path / "7" / "final")
    save(step, tokenizer, tmp_path / "7" / "checkpoints" / "step-000400")
    monkeypatch.setenv("RLPLANE_RUNS_DIR", str(tmp_path))
    assert same_weights(load_model("run:7")[0], final)
    assert same_weights(load_model("run:7@400")[0], step)


def test_missing_local_directory(tmp_path, offline):
    with pytest.raises(ModelError, match="does not exist"):
        load_model(str(tmp_path / "nowhere"))


def test_hub_id_fails_fast_offline(offline):
    started = time.monotonic()
    with pytest.raises(ModelError) as error:
        load_model("some-org/some-model", revision="main")
    assert time.monotonic() - started < 5
    message = str(error.value)
    assert "unknown model 'some-org/some-model': not a builtin (available: builtin:tiny-gpt2" in message
    assert "not a local directory" in message and "Hugging Face hub" in message


# --- LoRA and the spec section ---


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("kind", ["causal", "score"])
@pytest.mark.parametrize("targets", [[], ["all-linear"]])
def test_lora_trains_only_adapters_and_score_head(name, kind, targets):
    model, tokenizer = build_builtin(name, kind)
    spec = LoraSpec.model_construct(r=4, alpha=8.0, dropout=0.0, target_modules=targets)
    peft_model = apply_lora(model, spec)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert any("lora_" in n for n in trainable)
    extra = [n for n in trainable if "lora_" not in n]
    if kind == "score":
        assert extra and all(".score." in n for n in extra)
    else:
        assert extra == []
    out = peft_model(**batch(tokenizer)).logits
    assert out.shape[-1] == (1 if kind == "score" else len(tokenizer))


def test_lora_with_unknown_modules_is_a_model_error():
    model, _ = build_builtin("tiny-gpt2")
    with pytest.raises(ModelError, match="target_modules"):
        apply_lora(model, LoraSpec(target_modules=["no_such_proj"]))


def test_load_from_spec_applies_lora_and_checks_length():
    spec = ModelSpec(path="builtin:tiny-llama", max_seq_len=128, gradient_checkpointing=True, lora=LoraSpec(r=2))
    model, tokenizer = load_from_spec(spec)
    assert model.base_model.model.is_activation_checkpointing
    model.train()
    inputs = batch(tokenizer)
    model(**inputs, labels=inputs["input_ids"]).loss.backward()
    lora_grads = [p.grad for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_grads and all(g is not None for g in lora_grads)
    with pytest.raises(ModelError, match="max_seq_len"):
        load_from_spec(ModelSpec(path="builtin:tiny-gpt2", max_seq_len=1024))
