"""Project quotas at the API (api/runs/quotas.py): a site admin sets what a project may hold of a queue; a run beyond
it waits with the reason (not dispatched, its lease refused, holding and preempting nothing) while another project's
run starts, and starts itself once the project's runs there end; a run that could never fit is refused at submit."""

from tests.harness.factories import auth, create_project, create_user, spec, worker_token
from tests.test_gang import Broker, beat, reconciler
from tests.test_priorities import lease, running


def submit(client, name: str, project: str = "default", **resources):
    train = {**spec()["train"], "batch_size": 12}  # splits over 2 or 3 nodes
    body = spec(name=name, project=project, resources={"queue": "cpu", **resources}, train=train)
    return client.post("/api/v1/runs", json=body)


def launched(broker: Broker) -> list[int]:
    return [args[0] for task, args, _ in broker.sent if task == "runs.launch"]


def test_a_site_admin_sets_a_quota_and_a_run_that_could_never_fit_is_refused_at_submit(client, anon):
    member = create_user(client, "mia", roles={"default": "admin"}, scopes=("admin",))  # a project admin, not the site's
    quota = {"max_gpus": 2, "max_runs": 3}
    assert anon.put("/api/v1/projects/default/quotas/cpu", json=quota, headers=auth(member)).status_code == 403
    detail = client.put("/api/v1/projects/default/quotas/cpu", json=quota).json()
    assert detail["quotas"] == [{"queue": "cpu", "max_gpus": 2, "max_runs": 3, "used_gpus": 0, "used_runs": 0}]
    bad = client.put("/api/v1/projects/default/quotas/no such queue", json=quota)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "queue"]

    too_big = submit(client, "three-nodes", nodes=3)
    assert too_big.status_code == 422
    [error] = too_big.json()["detail"]
    assert error["loc"] == ["body", "resources", "nodes"]
    assert error["msg"] == (
        "the run asks for 3 worker slots and project default may hold at most 2 on queue cpu: lower resources.nodes, "
        "or ask a site admin to raise the quota"
    )
    assert submit(client, "two-nodes", nodes=2).status_code == 201
    assert client.delete("/api/v1/projects/default/quotas/cpu").status_code == 204
    assert client.delete("/api/v1/projects/default/quotas/cpu").status_code == 404
    assert client.get("/api/v1/projects/default").json()["quotas"] == []


def test_a_project_at_its_quota_waits_with_the_reason_while_another_projects_run_starts(app, client, anon):
    token, broker = worker_token(client), Broker()
    create_project(client, "vision")
    assert client.put("/api/v1/projects/vision/quotas/cpu", json={"max_runs": 1}).status_code == 200
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    first = submit(client, "vision-1", "vision").json()
    assert lease(anon, token, first["id"], "node-a").status_code == 200
    running(anon, token, first["id"])
    second = submit(client, "vision-2", "vision", priority="urgent").json()  # outranks, but over its quota
    other = submit(client, "nlp-1").json()
    tick = reconciler(app, broker, preempt_after_s=0.0)
    tick.dispatch()
    assert second["id"] not in launched(broker) and other["id"] in launched(broker)
    waiting = client.get(f"/api/v1/runs/{second['id']}").json()
    assert waiting["status"] == "queued"
    assert waiting["status_reason"] == "project vision is at its quota: 1 of 1 runs on queue cpu"
    refused = lease(anon, token, second["id"], "node-b")
    assert refused.status_code == 409
    assert refused.json()["detail"] == f"run {second['id']} waits: project vision is at its quota: 1 of 1 runs on queue cpu"
    assert lease(anon, token, other["id"], "node-b").status_code == 200  # not held for the urgent run it cannot start
    running(anon, token, other["id"])
    tick.preempt()  # nothing is preempted for a run its quota keeps waiting
    assert client.get(f"/api/v1/runs/{other['id']}").json()["preempted_by"] is None
    quotas = client.get("/api/v1/projects/vision").json()["quotas"]
    assert quotas == [{"queue": "cpu", "max_gpus": None, "max_runs": 1, "used_gpus": 1, "used_runs": 1}]
    [cpu] = client.get("/api/v1/queues").json()["data"]  # who holds what, who waits and why
    assert (cpu["name"], cpu["workers"], cpu["idle"]) == ("cpu", 2, 0)
    assert sorted((h["project"], h["slots"], h["runs"], h["max_runs"]) for h in cpu["holding"]) == [
        ("default", 1, 1, None),
        ("vision", 1, 1, 1),
    ]
    assert cpu["waiting"] == [
        {
            "run_id": second["id"],
            "name": "vision-2",
            "project": "vision",
            "priority": 100,
            "reason": "project vision is at its quota: 1 of 1 runs on queue cpu",
        }
    ]
    outsider = create_user(client, "oz", scopes=("read",))
    [hidden] = anon.get("/api/v1/queues", headers=auth(outsider)).json()["data"][0]["waiting"]
    assert (hidden["run_id"], hidden["name"], hidden["reason"], hidden["project"]) == (None, None, "", "(other projects)")
    [others] = anon.get("/api/v1/queues", headers=auth(outsider)).json()["data"][0]["holding"]
    assert (others["project"], others["slots"], others["runs"], others["max_runs"]) == ("(other projects)", 2, 2, None)

    done = {"attempt": 1, "status": "succeeded", "reason": "trainer exited 0"}
    assert anon.post(f"/api/v1/runs/{first['id']}/status", json=done, headers=auth(token)).status_code == 200
    broker.sent.clear()
    tick.dispatch()
    assert launched(broker) == [second["id"]]
    assert lease(anon, token, second["id"], "node-a").status_code == 200
