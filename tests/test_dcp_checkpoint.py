"""Our storage layer for torch.distributed.checkpoint (trainer_core/checkpoint/dcp_storage.py): two ranks
write their shards as safetensors and the index as JSON, nothing pickled, and the state loads back
resharded, in two processes split another way (tests/dcp_worker.py) and here in one. The recipes whose
checkpoints hold more than the model (ILQL's heads, PPO's value head and critic) resume exactly from a
sharded FSDP2 checkpoint (SFT's multi-process resumes: tests/test_backend_fsdp2.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors import safe_open
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

from rlplane.spec.sections import Fsdp2Backend as Fsdp2BackendSpec
from rlplane.spec.sections import TorchBackend as TorchBackendSpec
from rlplane.spec.sections import TrainSpec
from tests.dcp_worker import full_state
from tests.harness.launch import forked
from tests.harness.specs import ILQL_SPEC, ppo_spec
from tests.harness.training import assert_resume_is_exact, dropout_model
from trainer_core.backends import Backend, BackendError, TorchBackend, make_backend
from trainer_core.checkpoint import CheckpointError
from trainer_core.checkpoint.dcp_metadata import decode_metadata, encode_metadata
from trainer_core.checkpoint.dcp_storage import METADATA, SafetensorsReader, SafetensorsWriter
from trainer_core.checkpoint.sharded import VALUES, load_sharded
from trainer_core.recipes.checkpointing import restore_training

ROOT = Path(__file__).resolve().parents[1]
PICKLE_MAGIC = b"\x80"  # the first byte of every pickle (protocol 2+), torch.save's zip archives hold one too


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/dcp_worker.py as 2 forked ranks: saved split by rows, loaded back split by columns."""
    directory = tmp_path_factory.mktemp("dcp") / "state"
    forked([str(ROOT / "tests" / "dcp_worker.py"), str(directory)], 2, directory.parent / "ranks.log", timeout=300)
    return directory


def one_process_template() -> dict:
    """full_state()'s keys with zeroed whole tensors: what a world of one loads into."""
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in full_state().items()}


def load_here(directory: Path, template: dict) -> dict:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process, no group: intended
        return load_sharded(directory, template)


def test_two_ranks_write_safetensors_and_json_only(saved: Path) -> None:
    """One safetensors file per rank holding only that rank's chunks, the index and the plain values as JSON;
    no file is a pickle."""
    names = sorted(path.name for path in saved.iterdir())
    assert names == ["__0_0.safetensors", "__1_0.safetensors", METADATA, VALUES]
    for path in saved.iterdir():
        assert not path.read_bytes().startswith(PICKLE_MAGIC), path
        if path.suffix == ".json":
            json.loads(path.read_text())
    with (
        safe_open(str(saved / "__0_0.safetensors"), framework="pt") as rank0,
        safe_open(str(saved / "__1_0.safetensors"), framework="pt") as rank1,
    ):
        # Rows 0-4 of the embedding on rank 0, rows 5-9 on rank 1.
        assert rank0.get_tensor("model.embed.weight@0,0").shape == (5, 6)
        assert rank1.get_tensor("model.embed.weight@5,0").shape == (5, 6)
        # The replicated 0-d step count is written once, by one of the two ranks.
        assert ["optimizer.state.head.step@" in rank.keys() for rank in (rank0, rank1)].count(True) == 1
    values = json.loads((saved / VALUES).read_text())
    assert values["optimizer.param_groups.head.lr"] == 1e-3 and values["optimizer.param_groups.head.foreach"] is None


def test_one_process_loads_what_two_wrote(saved: Path) -> None:
    """Resharded from two ranks to one: every whole tensor (bf16 kept) and every plain value (a tuple stays a tuple)."""
    loaded = load_here(saved, one_process_template())
    for key, expected in full_state().items():
        if isinstance(expected, torch.Tensor):
            assert loaded[key].dtype == expected.dtype and torch.equal(loaded[key], expected), key
        else:
            assert loaded[key] == expected and type(loaded[key]) is type(expected), key


def test_the_metadata_round_trips_through_json(saved: Path) -> None:
    document = json.loads((saved / METADATA).read_text())
    metadata = decode_metadata(document)
    assert metadata == SafetensorsReader(saved).read_metadata()
    assert json.loads(json.dumps(encode_metadata(metadata))) == document
    bytes_entry = decode_metadata({**document, "entries": {**document["entries"], "blob": {"type": "bytes"}}})
    assert isinstance(bytes_entry.state_dict_metadata["blob"], BytesStorageMetadata)


def test_a_state_of_another_model_is_refused(saved: Path) -> None:
    template = one_process_template()
    template["model.extra.weight"] = torch.zeros(3)
    with pytest.raises(CheckpointError, match=r"missing \['model.extra.weight'\]"):
        load_here(saved, template)
    template = one_process_template()
    template["model.embed.weight"] = torch.zeros(11, 6)
    with pytest.raises(CheckpointError, match=r"model.embed.weight is \(10, 6\) in the checkpoint .*, \(11, 6\) here"):
        load_here(saved, template)


def test_a_non_tensor_item_is_refused_not_pickled(tmp_path: Path) -> None:
    """dcp's default planner would torch.save a non-tensor; our writer refuses it before anything is written."""
    with warnings.catch_warnings(), pytest.raises(CheckpointException, match="is not a tensor: dcp would pickle it"):
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"weight": torch.zeros(2), "note": "text"}, storage_writer=SafetensorsWriter(tmp_path / "state"))
    assert not (tmp_path / "state" / METADATA).exists()


def test_a_replica_backend_refuses_a_sharded_checkpoint(tmp_path: Path) -> None:
    """A resume names the backend that can read the shards; the backend itself is never asked to."""
    (tmp_path / "dcp").mkdir()
    (tmp_path / "dcp" / METADATA).write_text("{}")
    backend = TorchBackend(TorchBackendSpec(), TrainSpec(steps=1, batch_size=8))
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    expected = r"backend.kind fsdp2 writes it \(dcp/\), which backend.kind torch cannot read; resume it with backend.kind: fsdp2"
    with pytest.raises(CheckpointError, match=expected):
        restore_training(tmp_path, backend, optimizer, None)
    with pytest.raises(BackendError, match="reads gathered checkpoints, not sharded ones"):
        backend.load_sharded_state(tmp_path / "dcp", optimizer)


FSDP2 = {"kind": "fsdp2", "precision": "fp32"}


def test_ilql_resumes_exactly_from_a_sharded_checkpoint(tmp_path: Path) -> None:
    """ILQL's heads and target heads are part of the sharded model state (one process: a mesh of one)."""
    spec = {
        **ILQL_SPEC,
        "model": {"path": str(dropout_model(tmp_path / "model")), "max_seq_len": 16},
        "data": {"source": "builtin:randomwalks", "eval_fraction": 0.25},
        "train": {"steps": 6, "batch_size": 8, "micro_batch_size": 4, "lr": 3e-3, "warmup_steps": 2, "eval_every": 3},
        "ilql": {**ILQL_SPEC["ilql"], "alpha": 0.5, "steps_for_target_q_sync": 2},
        "backend": FSDP2,
    }
    assert_resume_is_exact(tmp_path, spec, 3, ("train/loss", "ilql/loss_q", "ilql/loss_v", "eval/loss", "eval/optimality"))
    assert (tmp_path / "resumed" / "checkpoints" / "step-000003" / "dcp" / METADATA).is_file()


def test_ppo_with_a_critic_resumes_exactly_from_a_sharded_checkpoint(tmp_path: Path) -> None:
    spec = ppo_spec("builtin:tiny-gpt2", {"kind": "builtin", "name": "randomwalks"}, steps=4, eval_every=2, checkpoint_every=2)
    spec["ppo"] |= {"target_kl": 0.5, "horizon": 100, "critic": {"path": "builtin:tiny-gpt2", "max_seq_len": 32}}
    spec["backend"] = FSDP2
    assert_resume_is_exact(tmp_path, spec, 2, ("reward/mean", "ppo/kl", "ppo/kl_coef", "ppo/value_loss", "ppo/policy_loss"))


class _PartlyUsed(torch.nn.Module):
    """A layer the loss never reaches has no gradient, hence no Adam state, when the checkpoint is saved."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.used, self.unused = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def _fsdp2_step(backend: Backend, model: torch.nn.Module) -> None:
    model(torch.linspace(-1, 1, 8).reshape(2, 4)).square().sum().backward()
    backend.step()


def test_a_parameter_without_optimizer_state_resumes_without_it(tmp_path: Path) -> None:
    """torch's state-dict API gives every parameter Adam state before a load; one that had none when saved is
    left out of the load and has none after it, so the next step is the uninterrupted run's."""
    spec, train = Fsdp2BackendSpec(precision="fp32"), TrainSpec(steps=2, batch_size=8)
    backend = make_backend(spec, train)
    try:
        first = _PartlyUsed()
        model, optimizer, _ = backend.prepare(first, torch.optim.AdamW(first.parameters(), lr=0.1))
        _fsdp2_step(backend, model)
        backend.save_sharded_state(tmp_path / "dcp", optimizer)
        _fsdp2_step(backend, model)
        straight = {name: p.full_tensor().clone() for name, p in model.named_parameters()}
    finally:
        backend.close()
    backend = make_backend(spec, train)
    try:
        fresh = _PartlyUsed()
        model, optimizer, _ = backend.prepare(fresh, torch.optim.AdamW(fresh.parameters(), lr=0.1))
        backend.load_sharded_state(tmp_path / "dcp", optimizer)
        assert len(optimizer.state) == 2  # used.weight and used.bias only
        _fsdp2_step(backend, model)
        assert all(torch.equal(p.full_tensor(), straight[name]) for name, p in model.named_parameters())
    finally:
        backend.close()
