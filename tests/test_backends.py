"""The torch backend on CPU: steps, clipping, accumulation, precision, and DDP over 2 gloo ranks."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlplane.ports import free_port
from rlplane.spec.sections import MegatronBackend, TrainSpec
from rlplane.spec.sections import TorchBackend as TorchBackendSpec
from tests.ddp_worker import TRAIN, fixed_batch, train
from trainer_core.backends import (
    BackendError,
    BatchSplitError,
    DistEnv,
    TorchBackend,
    local_batch_range,
    make_backend,
    micro_batch_ranges,
)
from trainer_core.models import build_builtin

ROOT = Path(__file__).resolve().parent.parent
SINGLE = DistEnv()


def backend(precision: str = "fp32", **train) -> TorchBackend:
    return TorchBackend(TorchBackendSpec(precision=precision), TrainSpec(**{"steps": 3, **train}), SINGLE)


def tiny_model(seed: int = 0) -> torch.nn.Module:
    model, _ = build_builtin("tiny-gpt2", kind="causal", seed=seed)
    return model.eval()  # no dropout, so runs compare exactly


def lm_loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def test_a_few_steps_reduce_the_loss_on_a_fixed_batch():
    b = backend(batch_size=4)
    model = tiny_model()
    model, _, _ = b.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    ids = fixed_batch(model.config.vocab_size, 4)
    losses = []
    for _ in range(5):
        loss = lm_loss(model, ids)
        b.backward(loss)
        b.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, losses
    assert all(p.grad is None for p in model.parameters())  # step zeroes the gradients


def test_step_returns_the_pre_clip_norm_and_clips_to_max_grad_norm():
    b = backend(max_grad_norm=1e-3)
    model = tiny_model()
    model, _, _ = b.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    before = [p.detach().clone() for p in model.parameters()]
    b.backward(lm_loss(model, fixed_batch(model.config.vocab_size, 2)))
    expected = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    assert b.step() == pytest.approx(expected, rel=1e-5)
    assert expected > 1e-2  # so clipping had work to do
    update = torch.cat([(p.detach() - old).flatten() for p, old in zip(model.parameters(), before, strict=True)])
    assert update.norm().item() == pytest.approx(1e-3, rel=1e-3)  # SGD lr 1: the update is the clipped gradient


def test_without_max_grad_norm_step_reports_the_norm_and_does_not_clip():
    b = backend(max_grad_norm=None)
    model = tiny_model()
    model, _, _ = b.prepare(model, torch.optim.SGD(model.parameters(), lr=1.0))
    before = [p.detach().clone() for p in model.parameters()]
    b.backward(lm_loss(model, fixed_batch(model.config.vocab_size, 2)))
    grads = [p.grad.clone() for p in model.parameters()]
    norm = b.step()
    assert norm == pytest.approx(torch.cat([g.flatten() for g in grads]).norm().item(), rel=1e-5)
    for p, old, g in zip(model.parameters(), before, grads, strict=True):
        torch.testing.assert_close(p.detach(), old - g)


def test_two_accumulated_micro_batches_equal_one_full_batch_step():
    ids = fixed_batch(tiny_model().config.vocab_size, 4)
    results = []
    for micro_batch_size in (None, 2):
        b = backend(batch_size=4, micro_batch_size=micro_batch_size)
        model = tiny_model()
        sched = torch.optim.lr_scheduler.LambdaLR(opt := torch.optim.SGD(model.parameters(), lr=0.5), lambda s: 1 / (s + 1))
        model, _, _ = b.prepare(model, opt, sched)
        micro = micro_batch_ranges(range(4), micro_batch_size)
        assert len(micro) == b.accumulation_steps
        for _ in range(2):
            for rows in micro:
                with b.no_sync(model):
                    b.backward(lm_loss(model, ids[rows.start : rows.stop]), len(micro))
            b.step()
        results.append(model)
    assert sched.last_epoch == 2
    for full, accumulated in zip(results[0].parameters(), results[1].parameters(), strict=True):
        torch.testing.assert_close(accumulated, full, atol=1e-6, rtol=1e-5)


def test_bf16_autocast_runs_on_cpu():
    b = backend("bf16")
    model = tiny_model()
    model, _, _ = b.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    ids = fixed_batch(model.config.vocab_size, 2)
    with b.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
        loss = lm_loss(model, ids)
    b.backward(loss)
    assert torch.isfinite(torch.tensor(b.step()))
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast keeps fp32 master weights


def test_fp16_on_cpu_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # on a GPU machine too: this is the CPU case
    with pytest.raises(BackendError, match=r"backend\.precision fp16 needs a CUDA GPU.*bf16 or fp32"):
        backend("fp16")


def test_make_backend_builds_megatron_for_one_process():
    """Tensor parallel 1 in a world of one (its own process group); the data-parallel view is the whole world."""
    b = make_backend(MegatronBackend(precision="fp32"), TrainSpec(steps=1), SINGLE)
    try:
        assert (type(b).__name__, b.tp_size, b.data_rank, b.data_world_size, b.is_rank_zero) == ("MegatronBackend", 1, 0, 1, True)
        assert b.all_reduce(torch.tensor([2.0, 4.0]), "sum").tolist() == [2.0, 4.0]
    finally:
        b.close()


def test_make_backend_builds_the_torch_backend_for_one_process():
    b = make_backend(TorchBackendSpec(), TrainSpec(steps=1), SINGLE)
    assert (b.rank, b.world_size, b.is_rank_zero, b.device.type) == (0, 1, True, "cpu")
    assert (b.data_rank, b.data_world_size) == (0, 1)  # no model parallelism: the data slice is the rank's
    assert b.all_reduce(torch.tensor([2.0, 4.0]), "sum").tolist() == [2.0, 4.0]
    b.barrier()
    b.close()


def test_generate_samples_from_the_unwrapped_model_without_gradients():
    b = backend()
    model = tiny_model()
    model, _, _ = b.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    prompt = fixed_batch(model.config.vocab_size, 1, length=4)
    out = b.generate(model, input_ids=prompt, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 7) and not out.requires_grad
    assert b.unwrap(model) is model


def test_ddp_off_with_several_processes_is_refused():
    with pytest.raises(BackendError, match="backend.ddp is false but WORLD_SIZE=2"):
        TorchBackend(TorchBackendSpec(ddp=False), TrainSpec(steps=1), DistEnv(rank=0, world_size=2))


def test_dist_env_reads_torchrun_variables_and_defaults_to_one_process():
    assert DistEnv.from_environ({}) == DistEnv()
    env = DistEnv.from_environ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_PORT": "1234"})
    assert (env.rank, env.world_size, env.local_rank, env.master_port) == (3, 4, 1, 1234)
    with pytest.raises(ValueError, match="RANK=4 WORLD_SIZE=4"):
        DistEnv.from_environ({"RANK": "4", "WORLD_SIZE": "4"})


def test_global_batch_splits_into_equal_rank_shares_and_micro_batches():
    shares = [local_batch_range(8, rank, 2) for rank in range(2)]
    assert shares == [range(0, 4), range(4, 8)]
    assert micro_batch_ranges(shares[1], 2) == [range(4, 6), range(6, 8)]
    assert micro_batch_ranges(shares[1], None) == [range(4, 8)]
    with pytest.raises(BatchSplitError, match="train.batch_size=6 does not split over 4 ranks"):
        local_batch_range(6, 0, 4)
    with pytest.raises(BatchSplitError, match="train.micro_batch_size=3"):
        micro_batch_ranges(range(4), 3)


def test_a_rendezvous_port_is_free_and_outside_the_ephemeral_range() -> None:
    """The kernel gives ephemeral ports to outgoing connections between the draw and the rendezvous's bind, which once
    took a gang's port (EADDRINUSE): the draw stays below that range, and the port binds."""
    start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for host in ("127.0.0.1", "127.0.0.3"):
        ports = {free_port(host) for _ in range(20)}
        assert all(1024 < port < start for port in ports), ports
        assert len(ports) > 1  # drawn, not one fixed port
        with socket.socket() as sock:
            sock.bind((host, ports.pop()))


def test_ddp_on_two_gloo_ranks_matches_one_process_on_the_global_batch(tmp_path):
    out = tmp_path / "ddp.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        str(ROOT / "tests" / "ddp_worker.py"),
        str(out),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert result.returncode == 0, f"torchrun failed:\n{result.stdout}\n{result.stderr}"
    rank0 = json.loads(out.read_text())
    rank1 = json.loads(out.with_name(out.name + ".rank1").read_text())

    reference = train(backend(**TRAIN), TrainSpec(**TRAIN))  # one process, the whole global batch
    assert rank0["world_size"] == 2
    assert rank1["checksum"] == rank0["checksum"]  # DDP kept the replicas identical
    assert rank1["update_checksum"] == rank0["update_checksum"]
    assert rank0["update_norm"] > 0.1  # training moved the weights
    for key in ("checksum", "update_checksum", "update_norm"):
        assert rank0[key] == pytest.approx(reference[key], rel=1e-5, abs=1e-5), key
    assert rank0["losses"] == pytest.approx(reference["losses"], rel=1e-5)
    assert rank0["grad_norms"] == pytest.approx(reference["grad_norms"], rel=1e-5)
