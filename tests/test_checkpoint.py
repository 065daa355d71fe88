"""trainer_core.checkpoint: exact resume, state round-trips, atomic writes, rotation, export, no pickle."""

import random
import re
from pathlib import Path

import huggingface_hub
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, get_linear_schedule_with_warmup

from rlplane.spec.sections import LoraSpec
from trainer_core import checkpoint as ckpt_module
from trainer_core.checkpoint import (
    CheckpointError,
    export_model,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    rank_rng,
    rotate,
    save_checkpoint,
    verify,
)
from trainer_core.checkpoint import state as state_module
from trainer_core.models import apply_lora, build_builtin

TOTAL_STEPS, RESUME_AT = 6, 3
SPEC = {"algorithm": "sft", "model": {"path": "builtin:tiny-gpt2"}}


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def batches(vocab: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return [torch.randint(0, vocab, (2, 16), generator=generator) for _ in range(TOTAL_STEPS)]


def training_objects(seed: int = 0):
    model, tokenizer = build_builtin("tiny-gpt2", kind="causal", seed=seed)
    model.train()  # dropout on: resuming exactly needs the RNG back
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=TOTAL_STEPS)
    return model, tokenizer, optimizer, scheduler


def train(model, optimizer, scheduler, data, steps: range) -> list[float]:
    losses = []
    for step in steps:
        loss = model(input_ids=data[step], labels=data[step]).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def save(run_dir: Path, step: int, model, tokenizer, optimizer, scheduler, **kwargs):
    return save_checkpoint(
        run_dir,
        step,
        model=model,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=scheduler,
        data_position={"epoch": 0, "index": step},
        spec=SPEC,
        **kwargs,
    )


def assert_same_state(left, right, path: str = "") -> None:
    assert type(left) is type(right), path
    if isinstance(left, torch.Tensor):
        assert left.dtype == right.dtype and torch.equal(left, right), path
    elif isinstance(left, dict):
        assert left.keys() == right.keys(), path
        for key in left:
            assert_same_state(left[key], right[key], f"{path}.{key}")
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right), path
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            assert_same_state(a, b, f"{path}.{index}")
    else:
        assert left == right, path


def test_resume_is_bit_identical_to_never_stopping(tmp_path):
    model, _, optimizer, scheduler = training_objects()
    data = batches(model.config.vocab_size)
    torch.manual_seed(1234)
    straight = train(model, optimizer, scheduler, data, range(TOTAL_STEPS))

    first, tokenizer, optimizer1, scheduler1 = training_objects()
    torch.manual_seed(1234)
    losses = train(first, optimizer1, scheduler1, data, range(RESUME_AT))
    info = save(tmp_path, RESUME_AT, first, tokenizer, optimizer1, scheduler1)
    torch.manual_seed(999)  # anything drawn after the save must not matter

    resumed, _, optimizer2, scheduler2 = training_objects(seed=1)  # other weights: the load must replace them
    state = load_checkpoint(latest_checkpoint(tmp_path), model=resumed, optimizer=optimizer2, scheduler=scheduler2)
    assert (state.step, state.data_position, state.spec) == (RESUME_AT, {"epoch": 0, "index": RESUME_AT}, SPEC)
    assert info.path == tmp_path / "step-000003" and verify(info.path)
    losses += train(resumed, optimizer2, scheduler2, data, range(state.step, TOTAL_STEPS))

    assert losses == straight
    assert resumed.lm_head.weight is resumed.transformer.wte.weight
    for (name, expected), actual in zip(model.named_parameters(), resumed.parameters(), strict=True):
        assert torch.equal(expected, actual), name


def test_optimizer_and_scheduler_round_trip(tmp_path):
    model, tokenizer, optimizer, scheduler = training_objects()
    train(model, optimizer, scheduler, batches(model.config.vocab_size), range(2))
    info = save(tmp_path, 2, model, tokenizer, optimizer, scheduler)
    _, _, optimizer2, scheduler2 = training_objects()
    fresh, _, _, _ = training_objects()
    optimizer2 = torch.optim.AdamW(fresh.parameters(), lr=5.0, betas=(0.5, 0.5))
    scheduler2 = get_linear_schedule_with_warmup(optimizer2, num_warmup_steps=9, num_training_steps=99)
    load_checkpoint(info.path, model=fresh, optimizer=optimizer2, scheduler=scheduler2, restore_rng=False)
    assert_same_state(optimizer.state_dict(), optimizer2.state_dict())
    assert isinstance(optimizer2.param_groups[0]["betas"], tuple)
    assert_same_state(scheduler.state_dict(), scheduler2.state_dict())
    assert scheduler2.get_last_lr() == scheduler.get_last_lr()


def test_rng_round_trip(tmp_path):
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    state_module.save_rng(tmp_path)
    expected = (torch.rand(4), random.random(), np.random.rand(3))
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    state_module.load_rng(tmp_path)
    assert torch.equal(torch.rand(4), expected[0])
    assert random.random() == expected[1]
    assert np.array_equal(np.random.rand(3), expected[2])


def draws() -> tuple:
    return torch.rand(4), random.random(), random.gauss(0, 1), np.random.rand(3), np.random.standard_normal()


def assert_same_draws(a: tuple, b: tuple) -> None:
    assert torch.equal(a[0], b[0]) and a[1:3] == b[1:3] and np.array_equal(a[3], b[3]) and a[4] == b[4]


def seeded(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    random.gauss(0, 1)  # leaves a cached Gaussian in Python's state, numpy's too: both must travel
    np.random.standard_normal()


def test_rank_rng_tensors_round_trip():
    seeded(5)
    tensors = rank_rng.rng_tensors()
    expected = draws()
    seeded(6)
    rank_rng.restore_rng_tensors(tensors)
    assert_same_draws(draws(), expected)


def test_each_data_parallel_rank_resumes_its_own_generators(tmp_path):
    """Saved by data-parallel rank; the same data-parallel size restores each rank's own, another size gives
    rank zero's to rank zero and draws apart from it elsewhere (never what rank zero draws)."""
    states, expected = {}, {}
    for rank in (0, 1):
        seeded(10 + rank)
        states[rank] = rank_rng.rng_tensors()
        if rank == 0:
            state_module.save_rng(tmp_path)  # rank zero's own, as save_checkpoint writes it
        expected[rank] = draws()
    rank_rng.save_rank_rngs(tmp_path, states)
    for rank in (0, 1):
        seeded(99)
        rank_rng.restore_rank_rng(tmp_path, rank, 2)
        assert_same_draws(draws(), expected[rank])
    seeded(99)
    rank_rng.restore_rank_rng(tmp_path, 0, 3)
    assert_same_draws(draws(), expected[0])
    seeded(99)
    rank_rng.restore_rank_rng(tmp_path, 2, 3)
    other = draws()
    assert not torch.equal(other[0], expected[0][0]) and other[1] != expected[0][1]
    seeded(99)
    rank_rng.restore_rank_rng(tmp_path, 2, 3)
    assert_same_draws(draws(), other)  # deterministic


def test_one_rank_writes_no_rank_file(tmp_path):
    rank_rng.save_rank_rngs(tmp_path, {0: rank_rng.rng_tensors()})
    assert not (tmp_path / rank_rng.RANK_RNG).exists()


def test_exception_mid_save_leaves_no_checkpoint(tmp_path, monkeypatch):
    model, tokenizer, optimizer, scheduler = training_objects()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(state_module, "save_scheduler", crash)
    with pytest.raises(OSError, match="disk full"):
        save(tmp_path, 5, model, tokenizer, optimizer, scheduler)
    assert latest_checkpoint(tmp_path) is None and list_checkpoints(tmp_path) == []
    assert list(tmp_path.iterdir()) == []  # the temporary directory is cleaned up


def test_a_fenced_attempt_writes_no_checkpoint(tmp_path, monkeypatch):
    """A trainer whose attempt the control plane ended (another attempt's number in the run directory's fence) has
    its checkpoint discarded before the rename, even when the fence moved while the checkpoint was being written."""
    from rlplane.layout import ATTEMPT_ENV, ATTEMPT_FILE
    from trainer_core.checkpoint import fence

    model, tokenizer, optimizer, scheduler = training_objects()
    run_dir, checkpoints = tmp_path, tmp_path / "checkpoints"
    monkeypatch.setenv(ATTEMPT_ENV, "2")
    (run_dir / ATTEMPT_FILE).write_text("2")
    fence.check(run_dir)  # its own attempt: fine
    save(checkpoints, 1, model, tokenizer, optimizer, scheduler, before_commit=lambda: fence.check(run_dir))

    def fenced_meanwhile():
        (run_dir / ATTEMPT_FILE).write_text("3")  # a new attempt took the directory during the write
        fence.check(run_dir)

    with pytest.raises(fence.Fenced, match="attempt 2 was ended: attempt 3 owns"):
        save(checkpoints, 2, model, tokenizer, optimizer, scheduler, before_commit=fenced_meanwhile)
    names = sorted(p.name for p in checkpoints.iterdir())
    assert [p.name for p in list_checkpoints(checkpoints)] == names == ["step-000001"]  # nothing left of step 2
    monkeypatch.delenv(ATTEMPT_ENV)
    fence.check(run_dir)  # a trainer no worker started is never fenced


def test_a_fenced_trainer_stops_after_its_step_and_reports_nothing_more(tmp_path, monkeypatch, capsys):
    """A trainer whose run directory another attempt claims while it trains (its worker silent, the run resumed
    elsewhere) stops after the step it is on, exit 4, without reporting that step, checkpointing or saying the run
    failed: the run is not over, it goes on in the new attempt. (A claim during a checkpoint's write discards the
    checkpoint: test_a_fenced_attempt_writes_no_checkpoint.)"""
    import json
    import threading

    import yaml

    from rlplane.layout import ATTEMPT_ENV, ATTEMPT_FILE
    from trainer_core import cli

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    train = {"steps": 100_000, "batch_size": 2, "log_every": 1, "eval_every": None, "checkpoint_every": None}
    model = {"path": "builtin:tiny-gpt2", "max_seq_len": 16}
    spec = {**SPEC, "name": "fenced", "model": model, "data": {"source": "builtin:arithmetic"}, "train": train}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    monkeypatch.setenv(ATTEMPT_ENV, "1")
    (run_dir / ATTEMPT_FILE).write_text("1")
    metrics = run_dir / "metrics.jsonl"

    def claim_once_training() -> None:  # what the next attempt's worker does, from outside the trainer
        while not (metrics.exists() and '"step":3,' in metrics.read_text()):
            threading.Event().wait(0.01)
        (run_dir / ATTEMPT_FILE).write_text("2")

    claimer = threading.Thread(target=claim_once_training, daemon=True)
    claimer.start()
    assert cli.main(["run", str(tmp_path / "spec.yaml"), "--out", str(run_dir)]) == 4
    claimer.join(timeout=5)
    said = capsys.readouterr().err
    ended = f"stopped: attempt 1 was ended: attempt 2 owns {run_dir} now, so this trainer"
    stopped = re.search(rf"{re.escape(ended)} stopped after step (\d+) without reporting it", said)
    assert stopped, said[-2000:]
    last = int(stopped[1])
    steps = {json.loads(line)["step"] for line in metrics.read_text().splitlines()}
    assert steps and max(steps) < last, (max(steps), last)  # not the step it stopped after, nor any after the claim
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    # its phases and no "failed": the run goes on; no checkpoint, no export
    assert [e["status"] for e in events] == ["running", "running", "running"]
    assert not (run_dir / "final").exists() and list_checkpoints(run_dir / "checkpoints") == []


def test_incomplete_and_truncated_checkpoints_are_skipped(tmp_path):
    model, tokenizer, optimizer, scheduler = training_objects()
    good = save(tmp_path, 1, model, tokenizer, optimizer, scheduler).path
    truncated = save(tmp_path, 2, model, tokenizer, optimizer, scheduler).path
    no_manifest = save(tmp_path, 3, model, tokenizer, optimizer, scheduler).path
    weights = truncated / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    (no_manifest / "manifest.json").unlink()
    (tmp_path / ".step-000004.tmp-dead").mkdir()  # a crash mid-write

    assert not verify(truncated) and not verify(no_manifest) and verify(good)
    assert list_checkpoints(tmp_path) == [good]
    assert latest_checkpoint(tmp_path) == good
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_checkpoint(truncated, model=model)


def test_flipped_byte_fails_verify(tmp_path):
    model, tokenizer, optimizer, scheduler = training_objects()
    path = save(tmp_path, 1, model, tokenizer, optimizer, scheduler).path
    target = path / "model" / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    assert not verify(path)
    assert latest_checkpoint(tmp_path) == path  # same size: only the hash check catches it


def test_rotate_keeps_newest_and_removes_temporaries(tmp_path):
    model, tokenizer, _, _ = training_objects()
    for step in (10, 20, 30, 40):
        save(tmp_path, step, model, tokenizer, None, None)
    (tmp_path / ".step-000050.tmp-abcd").mkdir()
    rotate(tmp_path, keep_last=2)
    assert [path.name for path in list_checkpoints(tmp_path)] == ["step-000030", "step-000040"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step-000030", "step-000040"]


def test_export_loads_with_from_pretrained(tmp_path, offline):
    model, tokenizer = build_builtin("tiny-gpt2", kind="causal", seed=0)
    out = export_model(model, tokenizer, tmp_path / "export")
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    loaded_tokenizer = AutoTokenizer.from_pretrained(out)
    ids = loaded_tokenizer(["12+7=19"], return_tensors="pt").input_ids
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_export_merges_lora_and_leaves_the_model_alone(tmp_path, offline):
    base, tokenizer = build_builtin("tiny-gpt2", kind="causal", seed=0)
    model = apply_lora(base, LoraSpec(r=4, alpha=8, dropout=0.0, target_modules=["c_attn"])).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()  # B starts at zero; make the adapter matter
    out = export_model(model, tokenizer, tmp_path / "merged")
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 5, 9, 12]])
    assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-5)
    assert any("lora_A" in name for name, _ in model.named_parameters())


def test_lora_checkpoint_saves_and_loads_the_adapter(tmp_path, offline):
    def lora_model(seed):
        base, tokenizer = build_builtin("tiny-gpt2", kind="causal", seed=0)
        model = apply_lora(base, LoraSpec(r=4, alpha=8, dropout=0.0, target_modules=["c_attn"]))
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for name, param in model.named_parameters():
                if "lora_" in name:
                    param.normal_()
        return model, tokenizer

    model, tokenizer = lora_model(1)
    path = save(tmp_path, 1, model, tokenizer, None, None).path
    assert (path / "model" / "adapter_model.safetensors").exists()
    other, _ = lora_model(2)
    load_checkpoint(path, model=other, restore_rng=False)
    for (name, expected), actual in zip(model.named_parameters(), other.parameters(), strict=True):
        assert torch.equal(expected, actual), name


def test_state_that_is_not_json_is_refused(tmp_path):
    model, tokenizer, _, _ = training_objects()
    with pytest.raises(CheckpointError, match="data_position"):
        save_checkpoint(
            tmp_path,
            1,
            model=model,
            tokenizer=tokenizer,
            optimizer=None,
            scheduler=None,
            data_position={"sampler": object()},
            spec=SPEC,
        )
    assert list(tmp_path.iterdir()) == []


def test_package_never_uses_pickle():
    # Uses, not mentions: the docstrings say "never pickle".
    pattern = re.compile(
        r"^\s*(import|from)\s+(pickle|cPickle|dill|cloudpickle|joblib)\b|\bpickle\.[a-z]|torch\.(save|load)\s*\(|safe_serialization=False",
        re.M,
    )
    package = Path(ckpt_module.__file__).parent
    offenders = [path.name for path in package.rglob("*.py") if pattern.search(path.read_text())]
    assert offenders == []


def test_reports_reach_the_run_directory_before_the_checkpoint_that_follows_them(tmp_path):
    """A trainer killed just after a checkpoint is resumed past it, so every metric up to that step must
    be in metrics.jsonl by the time the checkpoint is complete, even though the reporter writes lazily."""
    import json

    from rlplane.reporting.reporter import AsyncReporter
    from rlplane.reporting.sinks import JsonlSink
    from rlplane.spec import parse_spec
    from trainer_core.backends import make_backend
    from trainer_core.recipes.checkpointing import CheckpointState, save_and_rotate

    spec = parse_spec({**SPEC, "name": "lazy", "data": {"source": "builtin:arithmetic"}, "train": {"steps": 10}})
    model, tokenizer = build_builtin("tiny-gpt2")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    reporter = AsyncReporter([JsonlSink(tmp_path)], flush_interval=3600)  # would write only when asked
    try:
        reporter.metrics(7, {"train/loss": 1.5})
        saved = []
        real_save = save_checkpoint

        def save_then_look(*args, **kwargs):  # what a process killed right after the save would leave
            info = real_save(*args, **kwargs)
            saved.append((tmp_path / "metrics.jsonl").read_text() if (tmp_path / "metrics.jsonl").exists() else "")
            return info

        import trainer_core.recipes.checkpointing as checkpointing

        original, checkpointing.save_checkpoint = checkpointing.save_checkpoint, save_then_look
        try:
            state = CheckpointState(step=7, prepared=model, model=model, tokenizer=tokenizer, optimizer=optimizer,
                                    scheduler=None, data_position={}, spec={})  # fmt: skip
            save_and_rotate(tmp_path / "checkpoints", state, backend=make_backend(spec.backend, spec.train), keep_last=2,
                            reporter=reporter)  # fmt: skip
        finally:
            checkpointing.save_checkpoint = original
        assert [json.loads(line)["step"] for line in saved[0].splitlines()] == [7]
    finally:
        reporter.close()


def test_extra_modules_round_trip_and_must_fit(tmp_path):
    """A value head (or critic, Q heads) saved by name beside the model comes back exactly; a
    differently shaped module is refused with the fix, not loaded half-way."""
    model, _ = build_builtin("tiny-gpt2")
    head = torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    info = save_checkpoint(
        tmp_path,
        1,
        model=model,
        tokenizer=None,
        optimizer=None,
        scheduler=None,
        data_position={},
        spec=SPEC,
        modules={"value_head": head},
    )
    assert (info.path / "modules" / "value_head.safetensors").exists() and verify(info.path)

    fresh = torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    load_checkpoint(info.path, model=build_builtin("tiny-gpt2")[0], modules={"value_head": fresh}, restore_rng=False)
    assert all(torch.equal(a, b) for a, b in zip(head.state_dict().values(), fresh.state_dict().values(), strict=True))

    wrong = torch.nn.Sequential(torch.nn.Linear(64, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(info.path, model=model, modules={"value_head": wrong}, restore_rng=False)
    with pytest.raises(CheckpointError, match="without the critic module"):
        load_checkpoint(info.path, model=model, modules={"critic": fresh}, restore_rng=False)
