"""Checkpoints: registration (idempotent, path checked under the artifact root), listing, files, downloads."""

import io
import json
import math
import tarfile
import uuid

import pytest
from sqlalchemy import func, select

from api.models import Checkpoint
from tests.harness.checkpoints import JSON, MODEL_BYTES, OPTIM_BYTES, record, register
from tests.harness.factories import auth, create_project, create_run, create_user, worker_token


def stored(db, run_id: int) -> list[tuple]:
    db.expire_all()
    rows = db.scalars(select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.step)).all()
    return [(c.id, c.step, c.path, c.size, c.sha256, c.meta) for c in rows]


class TestRegisterCheckpoint:
    def test_registers_and_stores_the_record(self, client, db, ckpt_dir):
        run = create_run(client)
        response = register(client, run["id"], record(ckpt_dir))
        assert response.status_code == 201, response.text
        body = response.json()
        assert body["run_id"] == run["id"] and body["step"] == 5 and body["path"] == ckpt_dir
        assert body["metadata"] == {"rng_seed": 7, "data_position": 640} and body["created_at"]
        assert stored(db, run["id"]) == [
            (body["id"], 5, ckpt_dir, record(ckpt_dir)["size"], record(ckpt_dir)["sha256"], {"rng_seed": 7, "data_position": 640})
        ]

    def test_identical_record_again_is_200_and_stores_nothing(self, client, db, ckpt_dir):
        run = create_run(client)
        first = register(client, run["id"], record(ckpt_dir)).json()
        again = register(client, run["id"], record(ckpt_dir))
        assert again.status_code == 200 and again.json() == first
        assert db.scalar(select(func.count()).select_from(Checkpoint)) == 1

    @pytest.mark.parametrize(
        "change",
        [
            {"size": 1},
            {"sha256": "b" * 64},
            {"metadata": {"rng_seed": 8, "data_position": 640}},
            {"metadata": {}},
        ],
    )
    def test_a_different_record_for_the_same_step_is_409(self, client, db, ckpt_dir, change):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        before = stored(db, run["id"])
        response = register(client, run["id"], record(ckpt_dir, **change))
        assert response.status_code == 409
        assert "step 5" in response.json()["detail"]
        assert stored(db, run["id"]) == before

    def test_a_different_path_for_the_same_step_is_409(self, client, db, ckpt_dir, ckpt_file):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        assert register(client, run["id"], record(ckpt_file)).status_code == 409
        assert [row[2] for row in stored(db, run["id"])] == [ckpt_dir]

    def test_the_same_step_of_another_run_is_independent(self, client, db, ckpt_dir):
        first, second = create_run(client), create_run(client)
        assert register(client, first["id"], record(ckpt_dir)).status_code == 201
        assert register(client, second["id"], record(ckpt_dir, size=1)).status_code == 201

    def test_path_must_exist_under_the_artifact_root(self, client, db, ckpt_dir):
        run = create_run(client)
        response = register(client, run["id"], record(ckpt_dir + "-missing"))
        assert response.status_code == 422
        error = response.json()["detail"][0]
        assert error["loc"] == ["body", "path"] and "does not exist" in error["msg"]
        assert stored(db, run["id"]) == []

    @pytest.mark.parametrize(
        "path",
        [
            "../outside",
            "ckpts/../../outside",
            "/etc",
            "/tmp",
            "C:/Windows",
            "ckpts\\..\\..\\x",
            "ckpts/%2e%2e/x",
            "ckpts/..;/x",
            "./ckpts",
            "ckpts//x",
            "ckpts/",
            "ckpts/\x00",
            "ckpts/\n",
            "a" * 256,
        ],
    )
    def test_unsafe_paths_are_422_naming_path(self, client, db, path):
        run = create_run(client)
        response = register(client, run["id"], record(path))
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "path"]
        assert stored(db, run["id"]) == []

    def test_a_symlink_to_outside_the_root_is_422(self, client, db, artifacts_root, tmp_path):
        (tmp_path / "weights.bin").write_bytes(b"elsewhere")
        link = f"ckpts/{uuid.uuid4().hex}"
        (artifacts_root / "ckpts").mkdir(exist_ok=True)
        (artifacts_root / link).symlink_to(tmp_path, target_is_directory=True)
        run = create_run(client)
        response = register(client, run["id"], record(link))
        (artifacts_root / link).unlink()
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "path"]
        assert stored(db, run["id"]) == []

    def test_metadata_that_cannot_be_stored_is_422(self, client, db, ckpt_dir):
        run = create_run(client)
        body = json.dumps(record(ckpt_dir, metadata={"loss": math.nan}))  # json writes the NaN literal
        response = client.post(f"/api/v1/runs/{run['id']}/checkpoints", content=body, headers=JSON)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "metadata"] and "NaN" in response.json()["detail"][0]["msg"]
        nul = register(client, run["id"], record(ckpt_dir, metadata={"note": "a\x00b"}))
        assert nul.status_code == 422 and nul.json()["detail"][0]["loc"] == ["body", "metadata"]
        assert stored(db, run["id"]) == []

    def test_unknown_run_is_404(self, client, db, ckpt_dir):
        response = register(client, 999, record(ckpt_dir))
        assert response.status_code == 404 and "run 999" in response.json()["detail"]
        assert db.scalar(select(func.count()).select_from(Checkpoint)) == 0


class TestListCheckpoints:
    def test_lists_by_step(self, client, db, ckpt_dir, ckpt_file):
        run = create_run(client)
        register(client, run["id"], record(ckpt_file, step=20))
        register(client, run["id"], record(ckpt_dir, step=10))
        body = client.get(f"/api/v1/runs/{run['id']}/checkpoints").json()
        assert body["count"] == 2
        assert [(c["step"], c["path"]) for c in body["data"]] == [(10, ckpt_dir), (20, ckpt_file)]

    def test_only_the_checkpoints_the_trainer_keeps_are_listed(self, client, db, ckpt_dir, ckpt_file):
        """The trainer rotates to train.keep_last (by step); the records of the rotated ones go with them,
        whatever order they were registered in, and an export is never rotated."""
        run = create_run(client, train={"steps": 100, "batch_size": 8, "lr": 1e-3, "keep_last": 2})
        for step in (10, 30, 20, 40):
            assert register(client, run["id"], record(ckpt_dir, step=step)).status_code == 201
        register(client, run["id"], record(ckpt_file, step=40, kind="export"))
        listed = client.get(f"/api/v1/runs/{run['id']}/checkpoints").json()["data"]
        assert [(c["step"], c["kind"]) for c in listed] == [(30, "checkpoint"), (40, "checkpoint"), (40, "export")]
        assert [row[1] for row in stored(db, run["id"])] == [30, 40, 40]
        again = register(client, run["id"], record(ckpt_dir, step=40))  # a replayed registration changes nothing
        assert again.status_code == 200 and len(stored(db, run["id"])) == 3

    def test_empty_and_unknown_run(self, client, db):
        run = create_run(client)
        assert client.get(f"/api/v1/runs/{run['id']}/checkpoints").json() == {"data": [], "count": 0}
        assert client.get("/api/v1/runs/999/checkpoints").status_code == 404


class TestCheckpointFiles:
    def test_lists_every_file_of_a_directory(self, client, db, ckpt_dir):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        body = client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/files").json()
        assert body == {
            "data": [
                {"name": "model.safetensors", "size": len(MODEL_BYTES)},
                {"name": "optim/state.json", "size": len(OPTIM_BYTES)},
            ],
            "count": 2,
        }

    def test_a_single_file_checkpoint_lists_itself(self, client, db, ckpt_file):
        run = create_run(client)
        register(client, run["id"], record(ckpt_file))
        body = client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/files").json()
        assert body == {"data": [{"name": "final.safetensors", "size": len(MODEL_BYTES)}], "count": 1}

    def test_downloads_are_byte_identical(self, client, db, ckpt_dir, ckpt_file):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        register(client, run["id"], record(ckpt_file, step=6))
        model = client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/files/model.safetensors")
        assert model.status_code == 200 and model.content == MODEL_BYTES
        nested = client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/files/optim/state.json")
        assert nested.status_code == 200 and nested.content == OPTIM_BYTES
        single = client.get(f"/api/v1/runs/{run['id']}/checkpoints/6/files/final.safetensors")
        assert single.status_code == 200 and single.content == MODEL_BYTES

    def test_the_whole_checkpoint_downloads_as_one_tar(self, client, db, ckpt_dir, ckpt_file):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        register(client, run["id"], record(ckpt_file, step=6))
        response = client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/archive")
        assert response.status_code == 200 and response.headers["content-type"] == "application/x-tar"
        top = f"run-{run['id']}-checkpoint-step-5"
        assert response.headers["content-disposition"] == f'attachment; filename="{top}.tar"'
        with tarfile.open(fileobj=io.BytesIO(response.content)) as tar:
            names = sorted(m.name for m in tar.getmembers())
            assert names == [f"{top}/model.safetensors", f"{top}/optim/state.json"]
            assert tar.extractfile(f"{top}/model.safetensors").read() == MODEL_BYTES
            assert tar.extractfile(f"{top}/optim/state.json").read() == OPTIM_BYTES
        single = client.get(f"/api/v1/runs/{run['id']}/checkpoints/6/archive")
        with tarfile.open(fileobj=io.BytesIO(single.content)) as tar:
            [member] = tar.getmembers()
            assert tar.extractfile(member).read() == MODEL_BYTES
        assert client.get(f"/api/v1/runs/{run['id']}/checkpoints/7/archive").status_code == 404

    @pytest.mark.parametrize(
        "url",
        [
            "/api/v1/runs/999/checkpoints/5/files",
            "/api/v1/runs/999/checkpoints/5/files/model.safetensors",
            "/api/v1/runs/{run}/checkpoints/6/files",
            "/api/v1/runs/{run}/checkpoints/6/files/model.safetensors",
            "/api/v1/runs/{run}/checkpoints/5/files/nope.bin",
            "/api/v1/runs/{run}/checkpoints/5/files/optim",
            "/api/v1/runs/{run}/checkpoints/5/files/optim/nope.json",
            "/api/v1/runs/{run}/checkpoints/5/files/model.safetensors/x",
        ],
    )
    def test_unknown_run_step_or_file_is_404(self, client, db, ckpt_dir, url):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        response = client.get(url.format(run=run["id"]))
        assert response.status_code == 404
        assert response.json()["detail"].endswith("not found")

    def test_a_file_checkpoint_serves_only_its_own_name(self, client, db, ckpt_file):
        run = create_run(client)
        register(client, run["id"], record(ckpt_file))
        assert client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/files/other.safetensors").status_code == 404

    def test_a_vanished_directory_is_404(self, client, db, ckpt_dir, artifacts_root):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir))
        for path in sorted((artifacts_root / ckpt_dir).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (artifacts_root / ckpt_dir).rmdir()
        assert client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/files").status_code == 404
        assert client.get(f"/api/v1/runs/{run['id']}/checkpoints/5/files/model.safetensors").status_code == 404

    @pytest.mark.parametrize("step", ["-1", "x", str(2**63)])
    def test_bad_steps_are_422(self, client, db, step):
        run = create_run(client)
        response = client.get(f"/api/v1/runs/{run['id']}/checkpoints/{step}/files")
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["path", "step"]


class TestRunsSeeTheLatestCheckpoint:
    def test_run_detail_shows_the_highest_step(self, client, db, ckpt_dir, ckpt_file):
        run = create_run(client)
        assert client.get(f"/api/v1/runs/{run['id']}").json()["latest_checkpoint_step"] is None
        register(client, run["id"], record(ckpt_file, step=10))
        register(client, run["id"], record(ckpt_dir, step=5))  # arrives late: the latest stays 10
        assert client.get(f"/api/v1/runs/{run['id']}").json()["latest_checkpoint_step"] == 10

    def test_resume_names_the_checkpoint_and_the_lease_carries_it(self, client, db, ckpt_dir, ckpt_file):
        run = create_run(client)
        register(client, run["id"], record(ckpt_dir, step=5))
        register(client, run["id"], record(ckpt_file, step=12))
        assert client.post(f"/api/v1/runs/{run['id']}/cancel").status_code == 200
        resumed = client.post(f"/api/v1/runs/{run['id']}/resume")
        assert resumed.status_code == 200
        assert resumed.json()["status"] == "queued" and "checkpoint at step 12" in resumed.json()["status_reason"]
        lease = client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w1"}, headers=auth(worker_token(client)))
        assert lease.status_code == 200 and lease.json()["resume_from_step"] == 12


class TestExport:
    """The final model export (kind export) lives beside the checkpoint of the same step."""

    def test_export_and_checkpoint_share_a_step(self, client, db, ckpt_dir, ckpt_file):
        run_id = create_run(client)["id"]
        assert register(client, run_id, record(ckpt_dir, step=5)).status_code == 201
        export = record(ckpt_file, step=9, kind="export")
        response = register(client, run_id, export)
        assert response.status_code == 201 and response.json()["kind"] == "export"
        assert register(client, run_id, record(ckpt_file, step=5, kind="export")).status_code == 201
        assert register(client, run_id, export).status_code == 200  # idempotent
        assert register(client, run_id, {**export, "sha256": "0" * 64}).status_code == 409
        db.expire_all()
        kinds = db.execute(select(Checkpoint.step, Checkpoint.kind).where(Checkpoint.run_id == run_id)).all()
        assert sorted(kinds) == [(5, "checkpoint"), (5, "export"), (9, "export")]

        run = client.get(f"/api/v1/runs/{run_id}").json()
        assert run["latest_checkpoint_step"] == 5  # an export is not something to resume from
        assert run["output"] == {"step": 9, "path": ckpt_file, "size": export["size"], "sha256": export["sha256"]}
        listed = client.get(f"/api/v1/runs/{run_id}/checkpoints").json()["data"]
        assert [(c["step"], c["kind"]) for c in listed] == [(5, "checkpoint"), (5, "export"), (9, "export")]

    def test_export_files_are_served_by_kind(self, client, db, ckpt_dir, ckpt_file):
        run_id = create_run(client)["id"]
        register(client, run_id, record(ckpt_dir, step=5))
        register(client, run_id, record(ckpt_file, step=5, kind="export"))
        files = client.get(f"/api/v1/runs/{run_id}/checkpoints/5/files", params={"kind": "export"}).json()["data"]
        assert [f["name"] for f in files] == ["final.safetensors"]
        body = client.get(f"/api/v1/runs/{run_id}/checkpoints/5/files/final.safetensors", params={"kind": "export"})
        assert body.status_code == 200 and body.content == MODEL_BYTES
        assert client.get(f"/api/v1/runs/{run_id}/checkpoints/5/files", params={"kind": "nope"}).status_code == 422
        assert client.get(f"/api/v1/runs/{run_id}/checkpoints/7/files", params={"kind": "export"}).status_code == 404

    def test_a_new_run_has_no_output(self, client, db):
        assert client.get(f"/api/v1/runs/{create_run(client)['id']}").json()["output"] is None


class TestEvaluations:
    """An eval run (algorithm eval) shows beside the checkpoint its model.path names, with its eval/* metrics."""

    def eval_spec(self, model_path: str) -> dict:
        return {
            "algorithm": "eval",
            "name": "pass-at-k",
            "model": {"path": model_path},
            "data": {"source": "builtin:arithmetic"},
            "reward": {"kind": "builtin", "name": "arithmetic"},
            "eval": {"samples": 8, "k": [1, 4, 8]},
            "train": None,
        }

    def test_an_eval_run_shows_beside_the_checkpoint_it_names(self, client, db, ckpt_dir, ckpt_file):
        source = create_run(client)
        assert register(client, source["id"], record(ckpt_dir, step=5)).status_code == 201
        assert register(client, source["id"], record(ckpt_file, step=10, kind="export")).status_code == 201
        of_step = client.post("/api/v1/runs", json={k: v for k, v in self.eval_spec(f"run:{source['id']}@5").items() if v})
        on_episodes = {"greedy": True, "environment": {"kind": "builtin", "name": "calculator"}}  # judged by it, no reward
        played = {**self.eval_spec(f"run:{source['id']}"), "reward": None, "eval": on_episodes}
        of_output = client.post("/api/v1/runs", json={k: v for k, v in played.items() if v})
        assert of_step.status_code == of_output.status_code == 201, of_step.text
        assert of_step.json()["spec"]["train"]["steps"] == 1  # an evaluation is one step
        points = [
            {"key": "eval/accuracy", "step": 1, "value": 0.5},
            {"key": "eval/pass@4", "step": 1, "value": 0.75},
            {"key": "eval/pass@8", "step": 1, "value": "NaN"},
            {"key": "train/ignored", "step": 1, "value": 3.0},
        ]
        assert client.post(f"/api/v1/runs/{of_step.json()['id']}/metrics", json=points).status_code == 200

        listed = client.get(f"/api/v1/runs/{source['id']}/checkpoints").json()["data"]
        by_kind = {c["kind"]: c for c in listed}
        assert by_kind["checkpoint"]["evaluations"] == [
            {
                "run_id": of_step.json()["id"],
                "name": "pass-at-k",
                "status": "queued",
                "data": "builtin:arithmetic",
                "reward": "builtin:arithmetic",
                "samples": 8,
                "decoding": "sampled at T=1, 8 per prompt",  # said beside its accuracy, unlike a greedy one's
                "metrics": {"eval/accuracy": 0.5, "eval/pass@4": 0.75, "eval/pass@8": "NaN"},
            }
        ]
        [on_export] = by_kind["export"]["evaluations"]  # run:<id> names the run's output
        assert on_export["run_id"] == of_output.json()["id"] and on_export["metrics"] == {}
        assert (on_export["reward"], on_export["samples"]) == ("environment:builtin:calculator", 1)
        assert on_export["decoding"] == "greedy"
        # The eval runs are the source's children in its lineage, as any run that starts from it.
        children = client.get(f"/api/v1/runs/{source['id']}/lineage").json()["children"]
        assert sorted(c["run_id"] for c in children) == sorted([of_step.json()["id"], of_output.json()["id"]])

    def test_runs_of_another_project_stay_out_of_a_readers_lineage_and_evaluations(self, client, db, ckpt_dir):
        """Someone in two projects evaluates a checkpoint of one in the other: a reader of the first alone does not
        learn of that run (not as a child, not beside the checkpoint); a reader of both does."""
        source = create_run(client)
        assert register(client, source["id"], record(ckpt_dir, step=5)).status_code == 201
        create_project(client, "secret")
        hidden = client.post(
            "/api/v1/runs", json={**{k: v for k, v in self.eval_spec(f"run:{source['id']}@5").items() if v}, "project": "secret"}
        )
        shown = client.post("/api/v1/runs", json={k: v for k, v in self.eval_spec(f"run:{source['id']}@5").items() if v})
        assert hidden.status_code == shown.status_code == 201, hidden.text
        outsider = auth(create_user(client, "olga", roles={"default": "viewer"}, scopes=("read",)))
        insider = auth(create_user(client, "ivan", roles={"default": "viewer", "secret": "viewer"}, scopes=("read",)))
        for headers, expected in ((outsider, [shown.json()["id"]]), (insider, sorted([shown.json()["id"], hidden.json()["id"]]))):
            detail = client.get(f"/api/v1/runs/{source['id']}", headers=headers)
            lineage = client.get(f"/api/v1/runs/{source['id']}/lineage", headers=headers)
            listed = client.get(f"/api/v1/runs/{source['id']}/checkpoints", headers=headers)
            assert detail.status_code == lineage.status_code == listed.status_code == 200
            assert sorted(c["run_id"] for c in detail.json()["children"]) == expected
            assert sorted(c["run_id"] for c in lineage.json()["children"]) == expected
            assert sorted(e["run_id"] for e in listed.json()["data"][0]["evaluations"]) == expected
        # the hidden run's own page still names its parent to those who may read it
        parents = client.get(f"/api/v1/runs/{hidden.json()['id']}/lineage", headers=insider).json()["parents"]
        assert [p["run_id"] for p in parents] == [source["id"]]

    def test_an_eval_run_without_a_reward_is_refused_naming_the_field(self, client, db):
        source = create_run(client)
        spec = {k: v for k, v in self.eval_spec(f"run:{source['id']}").items() if v and k != "reward"}
        response = client.post("/api/v1/runs", json=spec)
        assert response.status_code == 422
        detail = response.json()["detail"]
        assert any(e["loc"] == ["body", "reward"] and "eval needs a reward" in e["msg"] for e in detail), detail


def test_what_judges_an_evaluation_is_told_in_short_from_its_typed_spec() -> None:
    """Each reward kind and environment in the words a user wrote; a URL (which may hold a token) never."""
    from api.checkpoints.service import judge_text
    from rlplane.spec import parse_spec

    def judged(**sections) -> str:
        return judge_text(parse_spec({"name": "e", "algorithm": "eval", "model": {"path": "run:3@5"}, **sections}))

    data = {"data": {"source": "builtin:arithmetic"}}
    assert judged(**data, reward={"kind": "model", "path": "run:12"}) == "model:run:12"
    terms = [
        {"name": "exact", "weight": 1.0, "source": {"kind": "python", "entrypoint": "my_rewards:exact"}},
        {"name": "judge", "weight": 0.5, "source": {"kind": "http", "url": "http://127.0.0.1:9/score?token=s3cret"}},
    ]
    assert judged(**data, reward={"kind": "sum", "terms": terms}) == "sum(python:my_rewards:exact, http)"
    service = {"kind": "http", "url": "http://agent:s3cret@127.0.0.1:9/env"}
    assert judged(**data, eval={"environment": service}) == "environment:http"
    calculator = {"environment": {"kind": "builtin", "name": "calculator"}}
    added = judged(**data, eval=calculator, reward={"kind": "builtin", "name": "arithmetic"})
    assert added == "environment:builtin:calculator + builtin:arithmetic"
