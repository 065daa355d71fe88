"""The SDK's calls (checked where they are made), its worker channel (the run directory's files), the Hugging Face
callback's key names, and the API of users' scripts: runs a script starts itself, their statuses, environment
records and checkpoint uploads, code snapshots, and the reconciler failing a script that fell silent. No process is
started here (tests/test_command_runs.py runs the real ones)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from sqlalchemy import select, update

import rlplane
from api.models import Run, RunAttempt, RunEvent
from api.models.base import utcnow
from api.runs import scripts
from rlplane import sdk
from rlplane.layout import CHECKPOINTS, ENVIRONMENT_FILE, HAND_BACK_FILE, MANIFEST, STOP_FILE
from rlplane.manifest import read_manifest
from rlplane.spec import parse_spec
from rlplane.spec.command import render_argv
from tests.harness.factories import auth, create_project, create_run, create_user

SCRIPT_SPEC = {"name": "my-loop", "algorithm": "command", "train": {"steps": 50}, "command": {"argv": ["train.py"]}}


@pytest.fixture
def no_exit_hooks(monkeypatch):
    """init() chains sys.excepthook and registers an atexit finish: not in the test process."""
    monkeypatch.setattr(sdk, "_finish_at_exit", lambda run: None)


@pytest.fixture
def attached(tmp_path, monkeypatch, no_exit_hooks) -> Path:
    """The environment a worker gives a command run's script."""
    run_dir = tmp_path / "runs" / "7"
    run_dir.mkdir(parents=True)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**SCRIPT_SPEC, "train": {"steps": 50, "keep_last": 2}, "command": {"config": {"a": 1}}}))
    for name, value in {"RUN_ID": "7", "RUN_DIR": str(run_dir), "SPEC": str(spec), "ATTEMPT": "1"}.items():
        monkeypatch.setenv(f"RLPLANE_{name}", value)
    monkeypatch.delenv("RANK", raising=False)
    return run_dir


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class TestCalls:
    def test_bad_metrics_raise_at_the_call_naming_the_key(self, attached):
        run = rlplane.init()
        with pytest.raises(rlplane.SdkError, match=r"metric key 'train loss': use 1-256 letters"):
            run.log({"train loss": 1.0})
        with pytest.raises(rlplane.SdkError, match=r"metric 'train/acc': True is not a number"):
            run.log({"train/acc": True})
        with pytest.raises(rlplane.SdkError, match=r"metric 'train/loss': str '0.5' is not a number"):
            run.log({"train/loss": "0.5"})
        with pytest.raises(rlplane.SdkError, match=r"metric 'x': Tensor .* is not a number"):
            run.log({"x": torch.tensor([1.0, 2.0])})
        with pytest.raises(rlplane.SdkError, match=r"step -1: give a whole number >= 0"):
            run.log({"x": 1.0}, step=-1)
        with pytest.raises(rlplane.SdkError, match=r"samples\[1\].response: give the text"):
            run.log_samples([{"prompt": "a", "response": "b"}, {"prompt": "a"}])
        with pytest.raises(rlplane.SdkError, match=r"samples\[0\]: unknown field\(s\) rewrd"):
            run.log_samples([{"prompt": "a", "response": "b", "rewrd": 1}])
        with pytest.raises(rlplane.SdkError, match=r"samples\[0\].turns\[1\]: a turn is \{'role': 'policy' or 'environment'"):
            run.log_samples([{"prompt": "a", "response": "b", "turns": [{"role": "policy", "text": "b"}, {"role": "tool"}]}])
        run.finish()
        assert not (attached / "metrics.jsonl").exists()  # nothing of the refused calls was written

    def test_steps_count_on_and_tensors_and_nan_are_numbers(self, attached):
        run = rlplane.init()
        run.log({"train/loss": torch.tensor(2.5)})
        run.log({"train/loss": float("nan")})
        run.log({"train/loss": 1}, step=10)
        run.log({"train/loss": 0.5})
        run.log_samples([{"prompt": "1+1=", "response": "2", "reward": 1, "advantage": 0.5, "group": 3}])
        turns = [
            {"role": "policy", "text": "<calc>1+1</calc>"},
            {"role": "environment", "text": "2"},
            {"role": "policy", "text": "2"},
        ]
        run.log_samples([{"prompt": "1+1=", "response": "<calc>1+1</calc>22", "turns": turns}])
        run.finish()
        points = [(p["step"], p["value"]) for p in lines(attached / "metrics.jsonl")]
        assert points == [(0, 2.5), (1, "NaN"), (10, 1.0), (11, 0.5)]
        sample, episode = lines(attached / "samples.jsonl")
        assert (sample["step"], sample["reward"], sample["scores"]) == (11, 1.0, {"advantage": 0.5, "group": 3.0})
        assert "turns" not in sample and episode["turns"] == turns


class TestWorkerChannel:
    def test_checkpoints_go_into_the_run_directory_with_a_manifest_and_rotate(self, attached, tmp_path):
        run = rlplane.init(config={"b": 2})
        assert (run.id, run.config, run.resume_from) == (7, {"a": 1, "b": 2}, None)
        saved = tmp_path / "hf" / "checkpoint"
        for step in (10, 20, 30):
            saved.mkdir(parents=True, exist_ok=True)
            (saved / "weights.bin").write_bytes(bytes([step]) * 100)
            run.log({"train/loss": 1.0 / step}, step=step)
            run.log_checkpoint(saved, step=step, note="hf")
        run.finish()
        kept = sorted(p.name for p in (attached / CHECKPOINTS).iterdir())
        assert kept == ["step-000020", "step-000030"]  # train.keep_last: 2
        manifest = read_manifest(attached / CHECKPOINTS / "step-000030")
        assert manifest["step"] == 30 and set(manifest["files"]) == {"weights.bin"}
        events = [e for e in lines(attached / "events.jsonl") if e["type"] == "checkpoint"]
        assert [(e["step"], e["path"], e["metadata"]) for e in events][-1] == (
            30,
            "checkpoints/step-000030",
            {"kind": "checkpoint", "note": "hf"},
        )
        environment = json.loads((attached / ENVIRONMENT_FILE).read_text())
        assert environment["config"] == {"b": 2} and environment["packages"]["torch"].startswith("2.")
        again = rlplane.init()  # the next attempt of the run resumes from the newest
        assert again.resume_from == attached / CHECKPOINTS / "step-000030"
        again.finish()

    def test_should_stop_follows_the_workers_request_and_other_ranks_report_nothing(self, attached, monkeypatch):
        monkeypatch.setenv("RANK", "1")
        other = rlplane.init()
        other.log({"train/loss": 1.0})
        assert not other.reporting and not other.should_stop()
        (attached / HAND_BACK_FILE).touch()  # the worker drains: save and leave
        assert other.should_stop()
        (attached / HAND_BACK_FILE).unlink()
        assert not other.should_stop()
        (attached / STOP_FILE).touch()  # a cancel
        assert other.should_stop()
        (attached / STOP_FILE).unlink()
        (attached / ".attempt").write_text("1")  # this attempt's own claim
        assert not other.should_stop()
        (attached / ".attempt").write_text("2")  # its worker went silent, and the run went on elsewhere
        assert other.should_stop()
        other.finish()
        assert not (attached / "metrics.jsonl").exists() and not (attached / ENVIRONMENT_FILE).exists()

    def test_once_another_attempt_owns_the_run_directory_nothing_more_is_written_there(self, attached, tmp_path):
        """A script that goes on after the control plane gave its run to another attempt (its worker silent): what it
        logs is dropped, should_stop() is true and its checkpoint is refused, so the new attempt's reports stay its
        own."""
        (attached / ".attempt").write_text("1")
        run = rlplane.init()
        run.log({"train/loss": 1.0}, step=1)
        assert run.flush(timeout=10)
        (attached / ".attempt").write_text("2")
        run.log({"train/loss": 2.0}, step=2)
        run.log_samples([{"prompt": "p", "response": "r"}])
        assert run.flush(timeout=10) and run.should_stop()
        (tmp_path / "ckpt").mkdir()
        with pytest.raises(rlplane.SdkError, match="attempt 1 of run 7 is over"):
            run.log_checkpoint(tmp_path / "ckpt")
        run.finish()
        assert [row["step"] for row in lines(attached / "metrics.jsonl")] == [1]
        assert not (attached / "samples.jsonl").exists()

    def test_a_second_init_finishes_the_first_run(self, attached):
        first = rlplane.init()
        second = rlplane.init()
        assert first.finished and not second.finished
        second.finish()
        assert second.finished

    def test_a_missing_checkpoint_is_refused_at_the_call(self, attached, tmp_path):
        run = rlplane.init()
        with pytest.raises(rlplane.SdkError, match="does not exist; save the checkpoint first"):
            run.log_checkpoint(tmp_path / "nowhere", step=1)
        run.finish()

    def test_a_sharded_checkpoint_names_its_step_and_one_process_logs_it_as_any(self, attached, tmp_path, monkeypatch):
        """log_checkpoint(sharded=True) is called on every rank with the step (a gang's nodes on an fsspec root hand
        their parts in: tests/test_worker_remote_artifacts.py). Without such a gang, rank 0's call logs it as without
        `sharded`, and another rank's is dropped, even where its node saved nothing: so does the Hugging Face
        callback's on every process."""
        from types import SimpleNamespace

        from rlplane.integrations.hf import RlplaneCallback

        (tmp_path / "out" / "checkpoint-5").mkdir(parents=True)
        (tmp_path / "out" / "checkpoint-5" / "model.bin").write_bytes(b"w")
        run = rlplane.init()
        with pytest.raises(rlplane.SdkError, match="needs the step, the same on every rank"):
            run.log_checkpoint(tmp_path / "out" / "checkpoint-5", sharded=True)
        callback = RlplaneCallback(run, sharded=True)
        args, state = (
            SimpleNamespace(output_dir=str(tmp_path / "out")),
            SimpleNamespace(global_step=5, is_world_process_zero=True),
        )
        callback.on_save(args, state, None)
        run.finish()
        assert set(read_manifest(attached / CHECKPOINTS / "step-000005")["files"]) == {"model.bin"}
        monkeypatch.setenv("RANK", "1")
        other = rlplane.init()
        RlplaneCallback(other, sharded=True).on_save(
            SimpleNamespace(output_dir=str(tmp_path / "none")), SimpleNamespace(global_step=6, is_world_process_zero=False), None
        )
        with pytest.raises(rlplane.SdkError, match="does not exist"):
            other.log_checkpoint(tmp_path / "none", step=6)
        other.finish()
        assert not (attached / CHECKPOINTS / "step-000006").exists()


def test_init_outside_a_worker_without_a_token_says_how_to_log_in(monkeypatch, tmp_path, no_exit_hooks):
    for name in ("RLPLANE_RUN_DIR", "RLPLANE_TOKEN", "RLPLANE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("RLPLANE_HOME", str(tmp_path / "home"))
    with pytest.raises(rlplane.SdkError, match="no token: run `rlplane login"):
        rlplane.init(url="http://127.0.0.1:9")


def test_placeholders_fill_from_the_spec_and_the_run():
    argv = ["python", "t.py", "--lr={train.lr}", "{command.config.fast}", "{run.dir}/x", "{{y}}"]
    spec = parse_spec({**SCRIPT_SPEC, "train": {"steps": 50, "lr": 3e-4}, "command": {"argv": argv, "config": {"fast": True}}})
    assert render_argv(spec, {"run.dir": "/r/7"}) == ["python", "t.py", "--lr=0.0003", "true", "/r/7/x", "{y}"]


def test_hugging_face_names_become_ours():
    from rlplane.integrations.hf import our_key

    assert [our_key(k, "grpo") for k in ("loss", "learning_rate", "grad_norm", "reward", "kl", "rewards/correct/mean")] == [
        "train/loss",
        "train/lr",
        "train/grad_norm",
        "reward/mean",
        "grpo/kl",
        "reward/correct",
    ]
    assert our_key("eval_loss", "hf") == "eval/loss" and our_key("eval_rewards/chosen", "hf") == "eval/rewards/chosen"
    assert our_key("clip_ratio/low_min", "grpo") == "clip_ratio/low_min"  # the rest as it is
    assert our_key("weird key!", "hf") == "weird_key_"


# --- the API of scripts' runs ---


def external(client, spec: dict | None = None, **body) -> dict:
    response = client.post("/api/v1/runs/external", json={"spec": spec or SCRIPT_SPEC, **body})
    assert response.status_code == 201, response.text
    return response.json()


class TestScriptedRuns:
    def test_a_script_starts_its_run_keeps_it_alive_and_ends_it(self, client, db):
        run = external(client, environment={"python": "3.11.9", "packages": {"torch": "2.13.0"}})
        assert run["status"] == "running" and run["spec"]["command"]["external"] is True
        assert [(a["number"], a["worker"]) for a in run["attempts"]] == [(1, "(script)")]
        assert run["environment"]["packages"] == {"torch": "2.13.0"}
        before = db.scalar(select(Run.updated_at).where(Run.id == run["id"]))
        alive = client.post(f"/api/v1/runs/{run['id']}/status", json={"attempt": 1, "status": "running"})
        assert alive.status_code == 200 and alive.json()["status"] == "running"
        db.expire_all()
        assert db.scalar(select(Run.updated_at).where(Run.id == run["id"])) > before  # the keep-alive counts
        end = {"attempt": 1, "status": "succeeded", "reason": "the script finished at step 50", "last_step": 50}
        done = client.post(f"/api/v1/runs/{run['id']}/status", json=end).json()
        assert (done["status"], done["status_reason"], done["last_step"]) == ("succeeded", end["reason"], 50)
        assert client.post(f"/api/v1/runs/{run['id']}/resume").status_code == 409

    def test_a_cancel_reaches_the_script_through_its_keep_alive(self, client):
        run = external(client)
        assert client.post(f"/api/v1/runs/{run['id']}/cancel").json()["status"] == "cancelling"
        alive = client.post(f"/api/v1/runs/{run['id']}/status", json={"attempt": 1, "status": "running"}).json()
        assert alive["status"] == "cancelling"
        ended = client.post(f"/api/v1/runs/{run['id']}/status", json={"attempt": 1, "status": "cancelled"}).json()
        assert ended["status"] == "cancelled" and ended["resumable"] is False  # its script runs it again, no worker

    def test_bad_requests_name_the_field(self, client):
        bad = client.post("/api/v1/runs/external", json={"spec": {**SCRIPT_SPEC, "train": {"steps": 0}}})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "spec", "train", "steps"]
        sft = {"name": "x", "algorithm": "sft", "model": {"path": "gpt2"}, "data": {"source": "org/data"}, "train": {"steps": 1}}
        bad = client.post("/api/v1/runs/external", json={"spec": sft})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "spec", "command"]
        bad = client.post("/api/v1/runs/external", json={"spec": {**SCRIPT_SPEC, "command": "train.py"}})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "spec", "command"]
        submitted = {**SCRIPT_SPEC, "command": {"argv": ["x"], "external": True}}
        bad = client.post("/api/v1/runs", json=submitted)
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "command", "external"]

    def test_a_workers_run_takes_no_status_from_a_user(self, client):
        run = create_run(client)
        refused = client.post(f"/api/v1/runs/{run['id']}/status", json={"attempt": 1, "status": "succeeded"})
        assert refused.status_code == 403 and "POST /api/v1/runs/" in refused.json()["detail"]

    def test_readers_cannot_start_or_end_scripted_runs(self, client):
        create_project(client, "lab")
        reader = create_user(client, "reader", roles={"lab": "viewer"}, scopes=("read", "write"))
        refused = client.post("/api/v1/runs/external", json={"spec": {**SCRIPT_SPEC, "project": "lab"}}, headers=auth(reader))
        assert refused.status_code == 403
        run = external(client, {**SCRIPT_SPEC, "project": "lab"})
        body = {"attempt": 1, "status": "succeeded"}
        assert client.post(f"/api/v1/runs/{run['id']}/status", json=body, headers=auth(reader)).status_code == 403

    def test_checkpoint_files_upload_to_scripted_runs_only(self, client):
        run = external(client)
        base = f"/api/v1/runs/{run['id']}/checkpoints"
        weights = bytes(range(256)) * 64
        assert client.put(f"{base}/5/files/model/weights.bin", content=weights).status_code == 201
        manifest = json.dumps({"format_version": 1, "step": 5, "files": {}}).encode()
        assert client.put(f"{base}/5/files/{MANIFEST}", content=manifest).status_code == 201
        body = {"step": 5, "path": f"runs/{run['id']}/checkpoints/step-000005", "size": 1, "sha256": "0" * 64}
        assert client.post(base, json={**body, "kind": "checkpoint", "metadata": {"kind": "checkpoint"}}).status_code == 201
        assert client.get(f"{base}/5/files/model/weights.bin").content == weights
        assert client.put(f"{base}/5/files/a%2F..%2Fb", content=b"x").status_code in (404, 422)
        worker_run = create_run(client)
        refused = client.put(f"/api/v1/runs/{worker_run['id']}/checkpoints/5/files/x.bin", content=b"x")
        assert refused.status_code == 409 and "stores its checkpoints itself" in refused.json()["detail"]

    def test_rotated_checkpoints_of_a_scripted_run_leave_the_artifact_root(self, client, artifacts_root):
        run = external(client, {**SCRIPT_SPEC, "train": {"steps": 50, "keep_last": 1}})
        base = f"/api/v1/runs/{run['id']}/checkpoints"
        for step in (5, 6):
            assert client.put(f"{base}/{step}/files/w.bin", content=bytes([step])).status_code == 201
            body = {"step": step, "path": f"runs/{run['id']}/checkpoints/step-{step:06d}", "size": 1, "sha256": "0" * 64}
            assert client.post(base, json={**body, "kind": "checkpoint"}).status_code == 201
        assert [c["step"] for c in client.get(base).json()["data"]] == [6]
        kept = artifacts_root / "runs" / str(run["id"]) / "checkpoints"
        assert sorted(p.name for p in kept.iterdir()) == ["step-000006"]  # step 5's files went with its record

    def test_a_script_that_falls_silent_is_failed(self, app, client, db):
        run = external(client)
        long_ago = utcnow() - timedelta(seconds=1000)
        db.execute(update(Run).where(Run.id == run["id"]).values(updated_at=long_ago))
        db.commit()
        assert scripts.fail_silent(app.state.sessionmaker, 300, born=long_ago) == [run["id"]]
        detail = client.get(f"/api/v1/runs/{run['id']}").json()
        assert detail["status"] == "failed" and detail["failure"] == "crashed"
        assert detail["status_reason"].startswith("its script sent nothing for 1000 s")
        assert db.scalar(select(RunAttempt.failure).where(RunAttempt.run_id == run["id"])) == "crashed"
        assert scripts.fail_silent(app.state.sessionmaker, 300, born=long_ago) == []

    def test_a_script_failed_for_its_silence_that_speaks_again_is_believed(self, app, client, db):
        """Its keep-alive (the network came back) makes it running again; its end sent late (rlplane sync) replaces
        the failure, with the checkpoint it uploads first. A run whose script failed it itself stays failed."""
        run = external(client)
        base, status = f"/api/v1/runs/{run['id']}", f"/api/v1/runs/{run['id']}/status"

        def fall_silent() -> None:
            long_ago = utcnow() - timedelta(seconds=1000)
            db.execute(update(Run).where(Run.id == run["id"]).values(updated_at=long_ago))
            db.commit()
            assert scripts.fail_silent(app.state.sessionmaker, 300, born=long_ago) == [run["id"]]

        fall_silent()
        back = client.post(status, json={"attempt": 1, "status": "running"})
        assert back.status_code == 200, back.text
        assert (back.json()["status"], back.json()["ended_at"], back.json()["failure"]) == ("running", None, None)
        assert "environment" not in back.json()  # a keep-alive's answer: the run, not its detail
        assert client.get(base).json()["attempts"][0]["end_reason"] is None
        fall_silent()
        assert client.put(f"{base}/checkpoints/9/files/w.bin", content=b"w").status_code == 201
        record = {"step": 9, "path": f"runs/{run['id']}/checkpoints/step-000009", "size": 1, "sha256": "0" * 64}
        assert client.post(f"{base}/checkpoints", json={**record, "kind": "checkpoint"}).status_code == 201
        end = {"attempt": 1, "status": "succeeded", "reason": "the script finished at step 9", "last_step": 9}
        late = client.post(status, json=end)
        assert late.status_code == 200, late.text
        body = client.get(base).json()
        assert (body["status"], body["failure"], body["last_step"]) == ("succeeded", None, 9)
        assert body["status_reason"].startswith("the script finished at step 9 (sent late")
        assert (body["attempts"][0]["failure"], body["attempts"][0]["end_reason"]) == (None, body["status_reason"])
        assert client.post(status, json=end).json()["status"] == "succeeded"  # a retried end changes nothing
        said = select(RunEvent.payload).where(RunEvent.run_id == run["id"], RunEvent.kind == "status").order_by(RunEvent.id)
        assert [p["status"] for p in db.scalars(said)][-4:] == ["failed", "running", "failed", "succeeded"]

        own = external(client)
        failed = {"attempt": 1, "status": "failed", "failure": "crashed", "reason": "ValueError"}
        assert client.post(f"/api/v1/runs/{own['id']}/status", json=failed).status_code == 200
        refused = client.post(f"/api/v1/runs/{own['id']}/status", json={"attempt": 1, "status": "succeeded"})
        assert refused.status_code == 409 and "cannot become succeeded" in refused.json()["detail"]
        refused = client.put(f"/api/v1/runs/{own['id']}/checkpoints/9/files/w.bin", content=b"w")
        assert refused.status_code == 409


def snapshot(members: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


class TestCodeSnapshots:
    def test_upload_then_submit_then_download(self, client):
        archive = snapshot({"train.py": b"print(1)\n", "lib/util.py": b"X = 2\n"})
        stored = client.post("/api/v1/code", files={"file": ("code.tar.gz", archive)}, data={"project": "default"})
        assert stored.status_code == 201, stored.text
        assert stored.json()["files"] == 2 and stored.json()["size"] == len(archive)
        sha = stored.json()["snapshot"]
        again = client.post("/api/v1/code", files={"file": ("code.tar.gz", archive)})
        assert again.json()["snapshot"] == sha  # content-addressed: kept once
        missing = {**SCRIPT_SPEC, "command": {"argv": ["python", "train.py"], "code": {"snapshot": "f" * 64}}}
        refused = client.post("/api/v1/runs", json=missing)
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "command", "code", "snapshot"]
        run = client.post(
            "/api/v1/runs", json={**missing, "command": {"argv": ["python", "train.py"], "code": {"snapshot": sha}}}
        )
        assert run.status_code == 201, run.text
        assert client.get(f"/api/v1/code/{sha}").content == archive
        create_project(client, "other")
        outsider = create_user(client, "outsider", roles={"other": "member"}, scopes=("read", "write"))
        assert client.get(f"/api/v1/code/{sha}", headers=auth(outsider)).status_code == 404

    def test_pipelines_and_sweeps_name_only_uploaded_snapshots(self, client):
        missing = {"argv": ["python", "t.py", "--lr", "{train.lr}"], "code": {"snapshot": "e" * 64}}
        stage = {k: v for k, v in SCRIPT_SPEC.items() if k != "name"} | {"command": missing}
        for path in ("/api/v1/pipelines", "/api/v1/pipelines/validate"):
            refused = client.post(path, json={"name": "p", "stages": {"train": {"spec": stage}}})
            assert refused.status_code == 422, refused.text
            [error] = refused.json()["detail"]
            assert error["loc"] == ["body", "stages", "train", "spec", "command", "code", "snapshot"]
            assert "POST /api/v1/code" in error["msg"]
        sweep = {"name": "s", "spec": stage, "space": {"train.lr": {"type": "categorical", "choices": [1e-4]}}, "metric": "m"}
        refused = client.post("/api/v1/sweeps", json=sweep)
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == [
            "body",
            "spec",
            "command",
            "code",
            "snapshot",
        ]

    @pytest.mark.parametrize(
        "archive, words",
        [
            (snapshot({"../evil.py": b"x"}), "'../evil.py' in the archive: path may not contain"),
            (gzip.compress(b"not a tar", mtime=0), "not a .tar.gz archive"),
            (b"plain bytes", "not a .tar.gz archive"),
        ],
        ids=["a-path-leaving-it", "gzip-but-no-tar", "plain-bytes"],  # pytest-xdist's workers must name them alike
    )
    def test_bad_snapshots_are_refused(self, client, archive, words):
        refused = client.post("/api/v1/code", files={"file": ("code.tar.gz", archive)})
        assert refused.status_code == 422 and words in refused.json()["detail"][0]["msg"], refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", "file"]
