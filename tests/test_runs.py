"""Runs: submission (JSON and YAML), listing, the state machine, lineage, leases."""

import pytest
import yaml
from sqlalchemy import func, select

from api.models import Checkpoint, Run, RunEvent, RunLink
from rlplane.client import Client
from rlplane.limits import MAX_REASON_CHARS
from tests.harness.factories import ApiWorker, auth, create_project, create_run, create_user, spec, worker_token
from tests.harness.launch import ROOT
from worker.client import WorkerApi
from worker.settings import WorkerSettings
from worker.supervise import Holding, supervise


class TestCreateRun:
    def test_json_spec_is_stored_with_defaults_filled(self, client, db):
        response = client.post("/api/v1/runs", json=spec())
        assert response.status_code == 201
        body = response.json()
        assert body["status"] == "queued" and body["project"] == "default" and body["created_by"] == "admin"
        assert body["total_steps"] == 20 and body["backend"] == "torch"
        stored = db.get(Run, body["id"])
        assert stored.spec["train"]["steps"] == 20
        assert stored.spec["backend"]["kind"] == "torch"  # defaults are explicit in what we store
        events = db.scalars(select(RunEvent).where(RunEvent.run_id == body["id"])).all()
        assert [e.payload["status"] for e in events] == ["queued"]

    def test_yaml_spec_is_accepted(self, client, db):
        text = yaml.safe_dump(spec(name="from-yaml"))
        response = client.post("/api/v1/runs", content=text, headers={"Content-Type": "application/yaml"})
        assert response.status_code == 201, response.text
        assert response.json()["name"] == "from-yaml"

    def test_invalid_spec_lists_each_bad_field(self, client, db):
        bad = spec(train={"steps": -1, "batch_size": 4, "lr": 1e-4, "lrr": 3})
        response = client.post("/api/v1/runs", json=bad)
        assert response.status_code == 422
        locs = {tuple(err["loc"]) for err in response.json()["detail"]}
        assert ("body", "train", "steps") in locs
        assert ("body", "train", "lrr") in locs
        assert db.scalar(select(Run.id)) is None

    def test_cross_field_rule(self, client, db):
        response = client.post("/api/v1/runs", json=spec(algorithm="ppo"))
        assert response.status_code == 422
        assert any(err["loc"][:2] == ["body", "reward"] for err in response.json()["detail"])

    def test_unknown_project_names_the_field(self, client, db):
        response = client.post("/api/v1/runs", json=spec(project="nope"))
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "project"]

    def test_a_learning_rate_of_1_or_more_is_accepted_with_a_warning(self, client, db):
        response = client.post("/api/v1/runs", json=spec(train={"steps": 20, "lr": 1e30}))
        assert response.status_code == 201, response.text
        [warning] = response.json()["warnings"]
        assert warning["loc"] == ["train", "lr"] and warning["msg"].startswith("train.lr 1e+30 is almost certainly a mistake")
        checked = client.post("/api/v1/runs/validate", json=spec(train={"steps": 20, "lr": 1.0})).json()
        assert [w["loc"] for w in checked["warnings"]] == [["train", "lr"]]
        assert client.post("/api/v1/runs", json=spec()).json()["warnings"] == []

    def test_no_token_is_401_before_the_body_is_read(self, anon, db):
        """Authentication before validation: a bad body from an unauthenticated client learns nothing but 401."""
        for path in ("/api/v1/runs", "/api/v1/runs/validate"):
            for token in ({}, {"Authorization": "Bearer wrong"}):
                response = anon.post(path, content=b"name: [", headers={"Content-Type": "application/yaml", **token})
                assert response.status_code == 401, (path, token, response.text)
        assert db.scalar(select(Run.id)) is None

    def test_what_no_worker_can_reach_is_refused_at_submit_naming_the_field_and_the_fix(self, client, db):
        sft_rows = b'{"prompt": "1+1=", "response": "2"}\n'
        dataset = client.post("/api/v1/datasets", files={"file": ("a.jsonl", sft_rows)}, data={"kind": "sft"}).json()
        cases = [
            ({"data": {"source": "./file.jsonl"}}, ["data", "source"], "is a file on your machine, which the workers"),
            ({"data": {"source": "file.jsonl"}}, ["data", "source"], "`rlplane submit` uploads it for you"),
            ({"data": {"source": "dataset:999"}}, ["data", "source"], "dataset:999 does not exist or is not visible"),
            ({"data": {"source": "builtin:tiny-sfft"}}, ["data", "source"], "did you mean builtin:tiny-sft?"),
            ({"model": {"path": "builtin:tiny-gpt3"}}, ["model", "path"], "did you mean builtin:tiny-gpt2?"),
            ({"model": {"path": "./my-model"}}, ["model", "path"], "is relative to your machine"),
            ({"model": {"path": "~/models/x"}}, ["model", "path"], "use run:<id>[@step] for a model trained here"),
            ({"model": {"path": "run:<sft id>"}}, ["model", "path"], "placeholder: write the run's id in place of <sft id>"),
            ({"algorithm": "dpo", "data": {"source": dataset["source"]}}, ["data", "source"], "holds sft rows but a dpo run"),
        ]
        for overrides, loc, says in cases:
            response = client.post("/api/v1/runs", json=spec(**overrides))
            assert response.status_code == 422, (overrides, response.text)
            [error] = response.json()["detail"]
            assert error["loc"] == ["body", *loc] and says in error["msg"], (overrides, error)
        assert db.scalar(select(Run.id)) is None
        fine = client.post("/api/v1/runs", json=spec(data={"source": dataset["source"]}, model={"path": "/shared/models/x"}))
        assert fine.status_code == 201, fine.text  # an absolute path: the workers may share that file system

    def test_malformed_yaml_and_json(self, client, db):
        r = client.post("/api/v1/runs", content="name: [unclosed", headers={"Content-Type": "application/yaml"})
        assert r.status_code == 422 and r.json()["detail"]
        r = client.post("/api/v1/runs", content="{not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 422
        r = client.post("/api/v1/runs", content="[1, 2]", headers={"Content-Type": "application/json"})
        assert r.status_code == 422
        r = client.post("/api/v1/runs", content="x", headers={"Content-Type": "text/plain"})
        assert r.status_code == 415
        assert db.scalar(select(Run.id)) is None


class TestListRuns:
    def test_filters_search_sort_paging(self, client, db):
        create_project(client, "other")
        ids = [create_run(client, name=f"sft-{i}")["id"] for i in range(5)]
        create_run(client, name="dpo-a", algorithm="dpo", data={"source": "builtin:tiny-preference"})
        create_run(client, name="elsewhere", project="other")
        client.post(f"/api/v1/runs/{ids[0]}/cancel")

        page = client.get("/api/v1/runs", params={"limit": 2, "offset": 0, "sort": "id"}).json()
        assert page["count"] == 7 and [r["id"] for r in page["data"]] == ids[:2]
        assert client.get("/api/v1/runs", params={"project": "other"}).json()["count"] == 1
        assert client.get("/api/v1/runs", params={"algorithm": "dpo"}).json()["data"][0]["name"] == "dpo-a"
        cancelled = client.get("/api/v1/runs", params={"status": "cancelled"}).json()
        assert [r["id"] for r in cancelled["data"]] == [ids[0]]
        assert client.get("/api/v1/runs", params={"q": "sft-"}).json()["count"] == 5
        assert client.get("/api/v1/runs", params={"q": "%"}).json()["count"] == 0  # wildcards are literal
        names = [r["name"] for r in client.get("/api/v1/runs", params={"sort": "-name"}).json()["data"]]
        assert names == sorted(names, reverse=True)

    def test_failed_command_runs_stay_in_the_list(self, client, db):
        """A failed command run, submitted or started by its script, is listed (it once made the list answer 500:
        the list defers the spec, and whether a command run could run again was read from it)."""
        command = {"algorithm": "command", "train": {"steps": 5}, "command": {"argv": ["train.py"]}}
        submitted = create_run(client, name="trl-example", **command)["id"]
        ApiWorker(client).finish(submitted, "failed")
        scripted = client.post("/api/v1/runs/external", json={"spec": {"name": "my-loop", **command}})
        assert scripted.status_code == 201, scripted.text
        ended = {"attempt": 1, "status": "failed", "reason": "exit code 1"}
        assert client.post(f"/api/v1/runs/{scripted.json()['id']}/status", json=ended).status_code == 200
        page = client.get("/api/v1/runs")
        assert page.status_code == 200, page.text
        listed = {r["name"]: (r["status"], r["resumable"]) for r in page.json()["data"]}
        assert listed == {"trl-example": ("failed", True), "my-loop": ("failed", False)}
        assert client.get(f"/api/v1/runs/{submitted}").json()["resumable"] is True

    def test_the_list_shows_the_lr_and_batch_size_a_run_has(self, client, db):
        """An eval run trains nothing (no lr or batch size), a command run's are its script's own (command.config, or
        what rlplane.init recorded), else the spec's only where its command line takes them: null otherwise, not the
        spec's defaults (an SDK run showed lr 1e-5 for its 3e-4)."""
        create_run(client, name="sft")
        create_run(
            client,
            name="eval",
            algorithm="eval",
            train={"steps": 1},
            data={"source": "builtin:arithmetic"},
            reward={"kind": "builtin", "name": "arithmetic"},
        )
        command = {"algorithm": "command", "train": {"steps": 5, "lr": 3e-3}}
        create_run(client, name="takes-lr", **command, command={"argv": ["train.py", "--lr", "{train.lr}"]})
        create_run(
            client,
            name="own-config",
            **command,
            command={"argv": ["train.py"], "config": {"learning_rate": 2e-4, "model": "my/model"}},
        )
        script = {
            "name": "sdk",
            "algorithm": "command",
            "train": {"steps": 5},
            "command": {"argv": ["loop.py"], "config": {"lr": 3e-4}},
        }
        sdk = client.post("/api/v1/runs/external", json={"spec": script}).json()
        later = {"python": "3.11", "config": {"lr": 3e-4, "batch_size": 32}}  # a worker-run script's init records its own
        assert client.post(f"/api/v1/runs/{sdk['id']}/environment", json=later).status_code == 200
        shown = {
            r["name"]: (r["config"]["model"], r["config"]["lr"], r["config"]["batch_size"])
            for r in client.get("/api/v1/runs").json()["data"]
        }
        assert shown == {
            "sft": ("builtin:tiny-gpt2", 1e-4, 4),
            "eval": ("builtin:tiny-gpt2", None, None),
            "takes-lr": ("builtin:tiny-gpt2", 3e-3, None),
            "own-config": ("my/model", 2e-4, None),
            "sdk": (None, 3e-4, 32),
        }

    def test_archived_runs_are_hidden_by_default(self, client, db):
        run = create_run(client)
        client.post(f"/api/v1/runs/{run['id']}/cancel")
        assert client.post(f"/api/v1/runs/{run['id']}/archive").status_code == 200
        assert client.get("/api/v1/runs").json()["count"] == 0
        assert client.get("/api/v1/runs", params={"archived": True}).json()["count"] == 1

    def test_bad_query_values_are_422(self, client, db):
        assert client.get("/api/v1/runs", params={"status": "bogus"}).status_code == 422
        assert client.get("/api/v1/runs", params={"limit": 0}).status_code == 422
        assert client.get("/api/v1/runs", params={"sort": "spec"}).status_code == 422


class TestStateMachine:
    def test_cancel_queued_ends_at_once_and_twice_is_409(self, client, db):
        run = create_run(client)
        body = client.post(f"/api/v1/runs/{run['id']}/cancel").json()
        assert body["status"] == "cancelled" and body["ended_at"] is not None
        again = client.post(f"/api/v1/runs/{run['id']}/cancel")
        assert again.status_code == 409 and "cancelled" in again.json()["detail"]

    def test_resume_only_from_failed_cancelled_lost(self, client, db):
        run = create_run(client)
        assert client.post(f"/api/v1/runs/{run['id']}/resume").status_code == 409
        client.post(f"/api/v1/runs/{run['id']}/cancel")
        resumed = client.post(f"/api/v1/runs/{run['id']}/resume").json()
        assert resumed["status"] == "queued" and "no checkpoint" in resumed["status_reason"]

    def test_archive_and_delete_need_an_ended_run(self, client, db, artifacts_root):
        run, other = create_run(client), create_run(client)
        for run_id in (run["id"], other["id"]):
            (artifacts_root / f"runs/{run_id}/checkpoints/step-000010").mkdir(parents=True)
            (artifacts_root / f"runs/{run_id}/metrics.jsonl").write_text("{}\n")
        assert client.post(f"/api/v1/runs/{run['id']}/archive").status_code == 409
        assert client.delete(f"/api/v1/runs/{run['id']}").status_code == 409
        assert (artifacts_root / f"runs/{run['id']}/metrics.jsonl").exists()  # a refused delete keeps everything
        client.post(f"/api/v1/runs/{run['id']}/cancel")
        assert client.delete(f"/api/v1/runs/{run['id']}").status_code == 204
        assert client.get(f"/api/v1/runs/{run['id']}").status_code == 404
        assert db.get(Run, run["id"]) is None
        assert not (artifacts_root / f"runs/{run['id']}").exists()  # its files went with it
        assert (artifacts_root / f"runs/{other['id']}/checkpoints/step-000010").is_dir()

    def test_a_parent_is_not_deleted_and_its_children_elsewhere_are_counted_not_named(self, client, db):
        parent = create_run(client)
        create_project(client, "elsewhere")
        # submitted while the parent is queued (it could still write its final model), then the parent is cancelled
        mine = create_run(client, name="child", model={"path": f"run:{parent['id']}"})
        theirs = create_run(client, name="theirs", project="elsewhere", model={"path": f"run:{parent['id']}"})
        client.post(f"/api/v1/runs/{parent['id']}/cancel")
        admin = auth(create_user(client, "ada", roles={"default": "admin"}, scopes=("admin",)))
        refused = client.delete(f"/api/v1/runs/{parent['id']}", headers=admin)
        assert refused.status_code == 409, refused.text
        detail = refused.json()["detail"]
        assert f"runs [{mine['id']}] and 1 run(s) in projects you cannot read" in detail and str(theirs["id"]) not in detail
        assert client.get(f"/api/v1/runs/{parent['id']}").status_code == 200  # nothing deleted
        both = client.delete(f"/api/v1/runs/{parent['id']}").json()["detail"]  # a site admin reads every project
        assert f"runs [{mine['id']}, {theirs['id']}]" in both

    def test_worker_lifecycle_with_fencing(self, client, db):
        token = worker_token(client)
        run = create_run(client)
        lease = client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w1"}, headers=auth(token))
        assert lease.status_code == 200 and lease.json()["attempt"] == 1
        assert client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w2"}, headers=auth(token)).status_code == 409
        update = {"attempt": 1, "status": "running", "last_step": 3}
        assert client.post(f"/api/v1/runs/{run['id']}/status", json=update, headers=auth(token)).status_code == 200
        cancelling = client.post(f"/api/v1/runs/{run['id']}/cancel").json()
        assert cancelling["status"] == "cancelling"
        stale = {"attempt": 0, "status": "cancelled"}
        assert client.post(f"/api/v1/runs/{run['id']}/status", json=stale, headers=auth(token)).status_code == 422
        stale["attempt"] = 2
        assert client.post(f"/api/v1/runs/{run['id']}/status", json=stale, headers=auth(token)).status_code == 409
        done = client.post(
            f"/api/v1/runs/{run['id']}/status",
            json={"attempt": 1, "status": "cancelled", "reason": "stopped"},
            headers=auth(token),
        ).json()
        assert done["status"] == "cancelled" and done["last_step"] == 3 and "attempts" not in done
        [attempt] = client.get(f"/api/v1/runs/{run['id']}").json()["attempts"]
        assert attempt["worker"] == "w1" and attempt["end_reason"] == "stopped"
        illegal = client.post(f"/api/v1/runs/{run['id']}/status", json={"attempt": 1, "status": "running"}, headers=auth(token))
        assert illegal.status_code == 409

    def test_a_run_cancelled_before_its_trainer_starts_stays_cancelling_until_the_worker_ends_it(self, client, db):
        token = worker_token(client)
        run = create_run(client)
        assert client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w1"}, headers=auth(token)).status_code == 200
        assert client.post(f"/api/v1/runs/{run['id']}/cancel").json()["status"] == "cancelling"
        # The worker's "running" (sent before it starts the trainer) does not undo the cancel; its answer says so.
        running = client.post(f"/api/v1/runs/{run['id']}/status", json={"attempt": 1, "status": "running"}, headers=auth(token))
        assert running.status_code == 200 and running.json()["status"] == "cancelling"
        ended = client.post(f"/api/v1/runs/{run['id']}/status", json={"attempt": 1, "status": "cancelled"}, headers=auth(token))
        assert ended.status_code == 200 and ended.json()["status"] == "cancelled"
        assert db.get(Run, run["id"]).status == "cancelled"

    def test_the_worker_ends_a_run_cancelled_before_its_trainer_started_without_starting_it(self, client, db, tmp_path):
        """The real worker code against the API, with the user's cancel landing between lease and start."""
        token, run = worker_token(client), create_run(client)

        class CancelledAfterLease(WorkerApi):
            def lease(self, run_id: int, worker: str):
                leased = super().lease(run_id, worker)
                assert client.post(f"/api/v1/runs/{run_id}/cancel").json()["status"] == "cancelling"
                return leased

        api = CancelledAfterLease(Client("http://testserver", token, http=client))
        # A trainer started with this interpreter would fail the attempt instead of cancelling it.
        settings = WorkerSettings(home=tmp_path, name="w1", python=str(tmp_path / "no-python"))
        assert supervise(settings, api, Holding(), run["id"]) == "cancelled"
        ended = client.get(f"/api/v1/runs/{run['id']}").json()
        assert ended["status"] == "cancelled" and ended["attempts"][0]["end_reason"] == "cancelled before its trainer started"

    def test_a_running_phase_is_the_runs_reason_and_a_new_attempt_starts_at_its_checkpoint(self, client, db):
        """A running status with a reason (the trainer's phase, which the worker forwards) becomes the run's reason;
        a new attempt's lease sets the run's step to the checkpoint it resumes from, not the step the last reached."""
        token = worker_token(client)
        run = create_run(client)
        assert client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w1"}, headers=auth(token)).status_code == 200
        started = {"attempt": 1, "status": "running", "reason": "attempt 1 on w1"}
        client.post(f"/api/v1/runs/{run['id']}/status", json=started, headers=auth(token))
        phase = {"attempt": 1, "status": "running", "reason": "starting the deepspeed backend (DeepSpeed builds ...)"}
        shown = client.post(f"/api/v1/runs/{run['id']}/status", json=phase, headers=auth(token)).json()
        assert (shown["status"], shown["status_reason"]) == ("running", phase["reason"])
        db.add(Checkpoint(run_id=run["id"], step=10, path="runs/x/10", size=1, sha256="0" * 64, meta={"kind": "checkpoint"}))
        db.commit()
        lost = {"attempt": 1, "status": "lost", "reason": "worker gone", "last_step": 17}
        assert client.post(f"/api/v1/runs/{run['id']}/status", json=lost, headers=auth(token)).json()["last_step"] == 17
        again = client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w2"}, headers=auth(token))
        assert again.status_code == 200 and again.json()["resume_from_step"] == 10
        assert client.get(f"/api/v1/runs/{run['id']}").json()["last_step"] == 10  # what it resumes from, not 17

    def test_a_lost_attempt_with_the_longest_reason_is_stored_and_retried(self, client, db):
        """A worker's lost status whose reason fills MAX_REASON_CHARS (a trainer's last lines): stored with the attempt
        as sent, and the run's reason, which adds where it retries from, keeps its start and that end within the
        column (it was a 422 and a lost final status)."""
        token, run = worker_token(client), create_run(client)
        assert client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w1"}, headers=auth(token)).status_code == 200
        reason = "rollout engine lost: the trainer exited 5:\n" + "x" * 3000
        lost = {"attempt": 1, "status": "lost", "reason": reason[-MAX_REASON_CHARS:]}
        answer = client.post(f"/api/v1/runs/{run['id']}/status", json=lost, headers=auth(token))
        assert answer.status_code == 200, answer.text
        shown = answer.json()
        assert shown["status"] == "queued" and len(shown["status_reason"]) <= MAX_REASON_CHARS
        assert shown["status_reason"].endswith("retrying from the start (attempt 2)"), shown["status_reason"][-80:]
        stored = client.get(f"/api/v1/runs/{run['id']}").json()["attempts"][0]["end_reason"]
        assert stored == lost["reason"]

    def test_user_tokens_cannot_lease(self, client, db):
        run = create_run(client)
        assert client.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "w"}).status_code == 403

    def test_a_stored_spec_this_version_no_longer_accepts_is_a_conflict_not_a_server_error(self, client, db):
        """The API reads a stored spec typed (Run.run_spec): one an older version stored that no longer validates
        answers 409 naming the field; the other runs answer as ever."""
        old, fine = create_run(client), create_run(client)
        row = db.get(Run, old["id"])
        row.spec = {**row.spec, "resources": {**row.spec["resources"], "retired_knob": 1}}
        db.commit()
        refused = client.get(f"/api/v1/runs/{old['id']}")
        assert refused.status_code == 409, refused.text
        detail = refused.json()["detail"]
        assert "stored spec does not validate with this version of rlplane (resources.retired_knob" in detail
        assert client.get(f"/api/v1/runs/{fine['id']}").status_code == 200


class TestLineage:
    def test_a_checkpoint_the_run_does_not_have_is_refused_naming_those_it_has(self, client, db):
        """run:<id>@<step> of a run that has ended must name one of its checkpoints, and run:<id> needs its final
        model; a run still to train may yet write the step (a queue serves a parent before the child submitted
        behind it), up to its last step. Each refusal is a 422 at the field, listing what the run has."""
        ended, queued = create_run(client, name="ended"), create_run(client, name="queued")  # 20 steps each
        ApiWorker(client).finish(ended["id"], "failed")
        for step in (10, 20):
            meta = {"kind": "checkpoint"}
            db.add(Checkpoint(run_id=ended["id"], step=step, path=f"runs/x/{step}", size=1, sha256="0" * 64, meta=meta))
        db.commit()
        dpo = {"algorithm": "dpo", "data": {"source": "builtin:tiny-preference"}}

        def submit(path: str):
            return client.post("/api/v1/runs", json=spec(name="child", model={"path": path}, **dpo))

        refused = submit(f"run:{ended['id']}@77")
        assert refused.status_code == 422
        [error] = refused.json()["detail"]
        assert error["loc"] == ["body", "model", "path"]
        assert error["msg"] == (
            f"run {ended['id']} (failed) has no checkpoint at step 77; its checkpoints are at steps 10, 20 "
            f"(run:{ended['id']}@20 is the latest)"
        )
        # the New run page checks as it types (POST /runs/validate): the same refusal at the same field
        checked = client.post("/api/v1/runs/validate", json=spec(name="child", model={"path": f"run:{ended['id']}@77"}, **dpo))
        assert checked.status_code == 422 and checked.json()["detail"] == [error]
        final = submit(f"run:{ended['id']}").json()["detail"][0]["msg"]
        assert final.startswith(f"run {ended['id']} (failed) has no final model; its checkpoints are at steps 10, 20")
        never = submit(f"run:{queued['id']}@999").json()["detail"][0]["msg"]
        assert never == f"run {queued['id']} trains 20 steps, so it will never have step 999; it has no checkpoint"
        for path in (f"run:{ended['id']}@20", f"run:{queued['id']}@20", f"run:{queued['id']}"):
            assert submit(path).status_code == 201, path
        assert db.scalar(select(func.count()).select_from(Run)) == 5  # the refused ones stored nothing

    def test_references_are_recorded_both_ways(self, client, db):
        sft = create_run(client, name="sft")
        rm = create_run(client, name="rm", algorithm="reward", data={"source": "builtin:tiny-preference"})
        ppo = create_run(
            client,
            name="ppo",
            algorithm="ppo",
            model={"path": f"run:{sft['id']}@10"},
            reward={"kind": "model", "path": f"run:{rm['id']}"},
            data={"source": "builtin:tiny-prompts"},
        )
        parents = {(p["run_id"], p["field"], p["step"]) for p in ppo["parents"]}
        assert (sft["id"], "model.path", 10) in parents
        assert any(p[0] == rm["id"] for p in parents)
        children = client.get(f"/api/v1/runs/{sft['id']}/lineage").json()["children"]
        assert [c["run_id"] for c in children] == [ppo["id"]]
        assert db.scalar(select(RunLink).where(RunLink.child_id == ppo["id"], RunLink.parent_id == sft["id"])) is not None
        client.post(f"/api/v1/runs/{sft['id']}/cancel")
        blocked = client.delete(f"/api/v1/runs/{sft['id']}")
        assert blocked.status_code == 409 and str(ppo["id"]) in blocked.json()["detail"]

    def test_a_data_source_run_is_a_generate_runs_dataset_of_the_rows_read(self, client, db):
        """data.source run:<id> names a generate run (Constitutional AI's data), recorded as a parent at data.source;
        a run that makes a model, or a generate run writing another kind of rows, is a 422 at the field."""
        generate = {"kind": "critique_revise", "principles": ["Be helpful."]}
        prompts = {"source": "builtin:tiny-prompts"}
        writer = create_run(client, name="writer", algorithm="generate", data=prompts, generate=generate, train={"steps": 1})
        reader = create_run(client, name="reader", data={"source": f"run:{writer['id']}"})
        assert {(p["run_id"], p["field"], p["step"]) for p in reader["parents"]} == {(writer["id"], "data.source", None)}
        for data, algorithm, words in (
            ({"source": f"run:{writer['id']}"}, "reward", f"run {writer['id']} writes sft rows but this run reads preference"),
            ({"source": f"run:{reader['id']}"}, "sft", f"run {reader['id']} is a sft run: it makes a model, not data"),
        ):
            refused = client.post("/api/v1/runs", json=spec(name="bad", algorithm=algorithm, data=data))
            assert refused.status_code == 422, refused.text
            [error] = refused.json()["detail"]
            assert error["loc"] == ["body", "data", "source"] and error["msg"].startswith(words), error
        assert db.scalar(select(func.count()).select_from(Run)) == 2
        stepped = client.post("/api/v1/runs", json=spec(name="bad", data={"source": f"run:{writer['id']}@1"}))
        assert stepped.status_code == 422 and "no @step" in stepped.json()["detail"][0]["msg"]

    def test_reference_to_missing_or_hidden_run_is_422(self, client, db):
        missing = client.post("/api/v1/runs", json=spec(model={"path": "run:999"}))
        assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "model", "path"]
        create_project(client, "secret")
        hidden = create_run(client, project="secret")
        token = create_user(client, "bob", roles={"default": "member"})
        response = client.post("/api/v1/runs", json=spec(model={"path": f"run:{hidden['id']}"}), headers=auth(token))
        assert response.status_code == 422


class TestExamples:
    def test_every_shipped_example_is_accepted_by_the_api(self, client, db):
        from pathlib import Path

        examples = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))
        assert len(examples) == 19
        sft = create_run(client, name="parent")
        for path in examples:
            text = path.read_text()
            response = client.post("/api/v1/runs", content=text, headers={"Content-Type": "application/yaml"})
            if "path: ./runs/" in text:  # an RL example chained to another example's local output (rlplane train)
                assert response.status_code == 422, (path.name, response.text)
                [error] = response.json()["detail"]
                assert error["loc"] == ["body", "model", "path"] and "relative to your machine" in error["msg"]
                document = yaml.safe_load(text)
                length = document["model"].get("max_seq_len", 32)  # an environment's episodes need the example's room
                chained = document | {"model": {"path": f"run:{sft['id']}", "max_seq_len": length}}
                response = client.post("/api/v1/runs", json=chained)
            assert response.status_code == 201, (path.name, response.text)
            assert response.json()["algorithm"] == path.stem.split("-")[0]


class TestValidate:
    """POST /runs/validate answers what a submit would, and stores nothing."""

    def test_a_good_spec_comes_back_with_defaults_and_parents(self, client, db):
        sft = create_run(client, name="sft")
        before = db.scalar(select(func.count()).select_from(Run))
        yaml_body = yaml.safe_dump(spec(name="child", model={"path": f"run:{sft['id']}@5"}))
        response = client.post("/api/v1/runs/validate", content=yaml_body, headers={"Content-Type": "application/yaml"})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["valid"] is True and body["spec"]["name"] == "child" and body["total_steps"] > 0
        assert body["spec"]["resources"]["queue"]  # defaults filled in
        assert [(p["run_id"], p["field"], p["step"]) for p in body["parents"]] == [(sft["id"], "model.path", 5)]
        db.expire_all()
        assert db.scalar(select(func.count()).select_from(Run)) == before
        assert db.scalar(select(func.count()).select_from(RunLink)) == 0

    def test_errors_carry_the_field_path(self, client, db):
        bad = client.post("/api/v1/runs/validate", json=spec(train={"lr": -1}))
        assert bad.status_code == 422
        assert any(err["loc"][:3] == ["body", "train", "lr"] for err in bad.json()["detail"]), bad.json()
        missing = client.post("/api/v1/runs/validate", json=spec(project="nope"))
        assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "project"]
        ref = client.post("/api/v1/runs/validate", json=spec(model={"path": "run:999"}))
        assert ref.status_code == 422 and ref.json()["detail"][0]["loc"] == ["body", "model", "path"]
        broken = client.post("/api/v1/runs/validate", content=b"name: [", headers={"Content-Type": "application/yaml"})
        assert broken.status_code == 422 and broken.json()["detail"]

    def test_viewers_cannot_validate_into_a_project_they_cannot_write(self, client, db):
        viewer = create_user(client, "v", roles={"default": "viewer"}, scopes=("read",))
        assert client.post("/api/v1/runs/validate", json=spec(), headers=auth(viewer)).status_code == 403


@pytest.mark.parametrize(
    ("example", "sets", "said"),
    [
        ("eval", ["eval.samples=1", "eval.k=[1]", "eval.greedy=true"], "greedy"),
        ("eval", ["eval.samples=1", "eval.k=[1]", "eval.greedy=false", "eval.gen.temperature=0.7"], "sampled at T=0.7"),
        ("eval", ["eval.samples=8", "eval.greedy=false", "eval.gen.temperature=1.0"], "sampled at T=1, 8 per prompt"),
        ("grpo", ["grpo.eval.samples=1", "grpo.gen.temperature=1.0"], "greedy"),
        ("ppo", ["ppo.eval.samples=4", "ppo.gen.temperature=0.9"], "sampled at T=0.9, 4 per prompt"),
        ("sft", [], None),
    ],
)
def test_the_decoding_said_beside_an_accuracy(example, sets, said):
    """Two accuracies of one checkpoint (an RL run's greedy held-out evaluation, a sampled eval run) each say how
    their answers were drawn: the runs list's config and a checkpoint's evaluations carry it."""
    from api.runs.views import config_summary, decoding
    from rlplane.spec import apply_overrides, parse_spec

    shipped = yaml.safe_load((ROOT / "examples" / f"{example}.yaml").read_text())
    spec = parse_spec(apply_overrides(shipped, sets))
    assert decoding(spec) == said and config_summary(spec)["decoding"] == said
