"""Multi-node runs at the API (api/runs/gang.py): a gang granted whole or waiting with its reason, the rendezvous,
one node's failure or silence ending the attempt for all, and the queue policy. The real processes (workers,
torchrun across nodes) are in tests/test_multinode.py. Beside them, a one-node run's message: sent again only while
its queue has an idle worker."""

from datetime import timedelta

from sqlalchemy import select, update

from api.models import AttemptNode, RunAttempt, Worker
from api.models.base import utcnow
from api.reconcile import Reconciler
from tests.harness.factories import auth, create_run, spec, worker_token


class Broker:
    """The reconciler's sender, recording what it would put on the broker."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list, str]] = []

    def __call__(self, task: str, args: list, queue: str) -> None:
        self.sent.append((task, args, queue))


def beat(anon, token, name, **fields):
    body = {"name": name, "queues": ["cpu"], "address": f"10.0.0.{ord(name[-1]) - 96}", **fields}
    response = anon.post("/api/v1/workers/heartbeat", json=body, headers=auth(token))
    assert response.status_code == 200, response.text
    return response.json()


def gang_run(client, nodes: int) -> dict:
    train = {**spec()["train"], "batch_size": 12}  # splits over 2 or 3 nodes
    return create_run(client, name=f"gang-{nodes}", resources={"queue": "cpu", "nodes": nodes}, train=train)


def reconciler(app, broker: Broker, **kwargs) -> Reconciler:
    return Reconciler(app.state.sessionmaker, broker, redispatch_s=0.0, **kwargs)


def joined_gang(app, client, anon, token: str, broker: Broker) -> tuple[dict, str]:
    """A 2-node run granted to node-a and node-b, both joined (node 0 with its rendezvous); the run and its
    attempt's path."""
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    run = gang_run(client, 2)
    reconciler(app, broker).dispatch()
    base = f"/api/v1/runs/{run['id']}/attempts/1"
    node0 = {"worker": "node-a", "address": "10.0.0.1", "port": 29500}
    assert anon.post(f"{base}/nodes/0/join", json=node0, headers=auth(token)).status_code == 200
    assert anon.post(f"{base}/nodes/1/join", json={"worker": "node-b"}, headers=auth(token)).status_code == 200
    return run, base


def test_a_gang_is_granted_whole_or_waits_with_its_reason(app, client, anon):
    token, broker = worker_token(client), Broker()
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    run = gang_run(client, 3)
    reconciler(app, broker).dispatch()
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    assert detail["status"] == "queued" and detail["attempts"] == [] and broker.sent == []
    assert detail["status_reason"] == (
        "waiting for 3 workers on queue cpu: 2 idle of 2 serving it; runs behind it go first until enough workers serve the queue"
    )
    beat(anon, token, "node-c")
    reconciler(app, broker).dispatch()
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    assert detail["status"] == "starting" and len(detail["attempts"]) == 1
    [attempt] = detail["attempts"]
    assert [(n["node_rank"], n["worker"], n["address"], n["state"]) for n in attempt["nodes"]] == [
        (0, "node-a", "10.0.0.1", "granted"),
        (1, "node-b", "10.0.0.2", "granted"),
        (2, "node-c", "10.0.0.3", "granted"),
    ]
    assert broker.sent == [("runs.node", [run["id"], 1, rank], f"node.node-{'abc'[rank]}") for rank in range(3)]
    # A one-node lease of the run is refused: its nodes are granted by the API.
    refused = anon.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "node-a"}, headers=auth(token))
    assert refused.status_code == 409


def test_rendezvous_and_one_nodes_failure_ends_the_attempt_for_all(app, client, anon):
    token, broker = worker_token(client), Broker()
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    run = gang_run(client, 2)
    reconciler(app, broker).dispatch()
    base = f"/api/v1/runs/{run['id']}/attempts/1"
    joined = anon.post(f"{base}/nodes/1/join", json={"worker": "node-b"}, headers=auth(token))
    assert joined.status_code == 200 and joined.json()["rendezvous"] == {
        "nodes": 2,
        "master_address": None,
        "master_port": None,
        "generator_address": None,
        "generator_port": None,
        "ended": False,
    }
    assert joined.json()["role"] == "trainer"
    assert joined.json()["run"]["spec"]["resources"]["nodes"] == 2
    wrong = anon.post(
        f"{base}/nodes/0/join", json={"worker": "node-b", "address": "10.0.0.2", "port": 29500}, headers=auth(token)
    )
    assert wrong.status_code == 403 and "granted to node-a" in wrong.json()["detail"]
    bare = anon.post(f"{base}/nodes/0/join", json={"worker": "node-a"}, headers=auth(token))
    assert bare.status_code == 409 and "rendezvous" in bare.json()["detail"]
    node0 = {"worker": "node-a", "address": "10.0.0.1", "port": 29500}
    assert anon.post(f"{base}/nodes/0/join", json=node0, headers=auth(token)).status_code == 200
    assert anon.post(f"{base}/nodes/0/join", json=node0, headers=auth(token)).status_code == 409  # once
    rendezvous = anon.get(f"{base}/rendezvous", headers=auth(token)).json()
    assert rendezvous == {"nodes": 2, "master_address": "10.0.0.1", "master_port": 29500, "ended": False} | {
        "generator_address": None,
        "generator_port": None,
    }
    status = {"attempt": 1, "status": "running", "reason": "node 0 started"}
    assert anon.post(f"/api/v1/runs/{run['id']}/status", json=status, headers=auth(token)).status_code == 200
    # Every node's worker heartbeats with the run; the answer names the run's status and current attempt.
    answer = beat(anon, token, "node-b", current_run_id=run["id"], current_attempt=1)
    assert (answer["current_run_status"], answer["current_run_attempt"]) == ("running", 1)
    listed = {w["name"]: w for w in client.get("/api/v1/workers").json()["data"]}
    place = {"run_id": run["id"], "attempt": 1, "node_rank": 1, "nodes": 2, "workers": ["node-a", "node-b"]}
    assert listed["node-b"]["gang"] == place and listed["node-b"]["address"] == "10.0.0.2"

    end = {"exit_code": 1, "reason": "trainer exited with 1: connection reset by peer", "failure": "crashed"}
    assert anon.post(f"{base}/nodes/1/end", json=end, headers=auth(token)).status_code == 200
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    assert detail["status"] == "queued" and "retrying from the start (attempt 2)" in detail["status_reason"]
    [attempt] = detail["attempts"]
    assert attempt["end_reason"].startswith("node 1 (node-b): trainer exited with 1") and attempt["failure"] is None
    assert [n["state"] for n in attempt["nodes"]] == ["ended", "ended"]  # the attempt ended for all
    assert anon.get(f"{base}/rendezvous", headers=auth(token)).json()["ended"] is True
    # Node 0's own crash report, after the attempt ended, changes nothing.
    crashed = {"attempt": 1, "status": "failed", "reason": "trainer exited with 1", "failure": "crashed"}
    assert anon.post(f"/api/v1/runs/{run['id']}/status", json=crashed, headers=auth(token)).status_code == 200
    assert client.get(f"/api/v1/runs/{run['id']}").json()["status"] == "queued"

    # Both workers still hold their trainers (their heartbeats say so): no new gang until they let go.
    beat(anon, token, "node-a", current_run_id=run["id"], current_attempt=1)
    reconciler(app, broker).dispatch()
    assert client.get(f"/api/v1/runs/{run['id']}").json()["status"] == "queued"
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    reconciler(app, broker).dispatch()
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    assert detail["status"] == "starting" and [len(a["nodes"]) for a in detail["attempts"]] == [2, 2]
    # The old attempt is fenced: its nodes can neither join again nor report.
    assert anon.post(f"{base}/nodes/0/join", json=node0, headers=auth(token)).status_code == 409
    assert anon.post(f"/api/v1/runs/{run['id']}/status", json=status, headers=auth(token)).status_code == 409
    # A heartbeat with the old attempt's progress (its trainer may still run) moves the run's last step no more.
    beat(anon, token, "node-a", current_run_id=run["id"], current_attempt=1, last_step=999)
    assert client.get(f"/api/v1/runs/{run['id']}").json()["last_step"] is None
    beat(anon, token, "node-a", current_run_id=run["id"], current_attempt=2, last_step=7)
    assert client.get(f"/api/v1/runs/{run['id']}").json()["last_step"] == 7


def test_a_generator_nodes_lease_names_its_role_and_the_rendezvous_where_its_generator_listens(app, client, anon):
    """grpo.generator node: the gang's last node is the generator. Its lease says so, it must join with where its
    generator listens, and the rendezvous hands that to node 0 (whose trainer connects to it); the run shows the roles."""
    token, broker = worker_token(client), Broker()
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    grpo = {"group_size": 4, "max_staleness": 1, "generator": "node"}
    run = create_run(
        client,
        algorithm="grpo",
        data={"source": "builtin:arithmetic"},
        reward={"kind": "builtin", "name": "arithmetic"},
        grpo=grpo,
        resources={"queue": "cpu", "nodes": 2},
    )
    reconciler(app, broker).dispatch()
    base = f"/api/v1/runs/{run['id']}/attempts/1"
    node0 = {"worker": "node-a", "address": "10.0.0.1", "port": 29500}
    lease = anon.post(f"{base}/nodes/0/join", json=node0, headers=auth(token)).json()
    assert lease["role"] == "trainer" and lease["rendezvous"]["generator_port"] is None
    bare = anon.post(f"{base}/nodes/1/join", json={"worker": "node-b"}, headers=auth(token))
    assert bare.status_code == 409 and bare.json()["detail"].startswith("a generator node joins with where its generator")
    listens = {"worker": "node-b", "address": "10.0.0.2", "port": 31000}
    lease = anon.post(f"{base}/nodes/1/join", json=listens, headers=auth(token)).json()
    assert lease["role"] == "generator"
    rendezvous = anon.get(f"{base}/rendezvous", headers=auth(token)).json()
    assert (rendezvous["generator_address"], rendezvous["generator_port"]) == ("10.0.0.2", 31000)
    assert rendezvous["master_port"] == 29500
    [attempt] = client.get(f"/api/v1/runs/{run['id']}").json()["attempts"]
    assert [(n["node_rank"], n["role"], n["port"]) for n in attempt["nodes"]] == [(0, "trainer", 29500), (1, "generator", 31000)]


def test_a_nodes_config_failure_fails_the_run(app, client, anon):
    token, broker = worker_token(client), Broker()
    run, base = joined_gang(app, client, anon, token, broker)
    end = {"exit_code": 2, "reason": "trainer exited with 2: data.source not found", "failure": "config"}
    anon.post(f"{base}/nodes/1/end", json=end, headers=auth(token))
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    assert (detail["status"], detail["failure"], detail["attempts"][0]["failure"]) == ("failed", "config", "config")


def test_a_node_that_handed_back_first_hands_the_attempt_back(app, client, anon):
    """Slurm's SIGTERM reaches every node of a job, and a gang's ranks agree on a hand-back: node 1's trainer may exit
    EXIT_HANDED_BACK (6) and its word reach the API before node 0's. The attempt is handed back, not lost: with
    max_attempts 1 the run is queued again, not failed. Node 0's worker's own end, which comes after, is kept on its
    node (it was once refused, and its worker, gone, was then named as having died first)."""
    token, broker = worker_token(client), Broker()
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    train = {**spec()["train"], "batch_size": 12}
    run = create_run(client, name="gang-handed-back", resources={"queue": "cpu", "nodes": 2, "max_attempts": 1}, train=train)
    reconciler(app, broker).dispatch()
    base = f"/api/v1/runs/{run['id']}/attempts/1"
    node0 = {"worker": "node-a", "address": "10.0.0.1", "port": 29500}
    assert anon.post(f"{base}/nodes/0/join", json=node0, headers=auth(token)).status_code == 200
    assert anon.post(f"{base}/nodes/1/join", json={"worker": "node-b"}, headers=auth(token)).status_code == 200
    end = {"exit_code": 6, "reason": "handed back: the trainer checkpointed with the gang and exited 6"}
    assert anon.post(f"{base}/nodes/1/end", json=end, headers=auth(token)).status_code == 200
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    [attempt] = detail["attempts"]
    assert detail["status"] == "queued" and attempt["handed_back"] is True, (detail["status"], attempt)
    assert "retrying from the start (attempt 2)" in detail["status_reason"]
    own = "handed back: worker node-a received SIGTERM (warm shutdown); checkpointed at step 40"
    late = {"attempt": 1, "status": "lost", "reason": own, "handed_back": True, "last_step": 40}
    answer = anon.post(f"/api/v1/runs/{run['id']}/status", json=late, headers=auth(token))
    assert answer.status_code == 200 and answer.json()["status"] == "queued", answer.text
    [attempt] = client.get(f"/api/v1/runs/{run['id']}").json()["attempts"]
    assert [(n["node_rank"], n["end_reason"]) for n in attempt["nodes"]] == [(0, own), (1, end["reason"])]
    assert attempt["end_reason"] == f"node 1 (node-b): {end['reason']}" and attempt["handed_back"] is True


def test_a_cancelled_gang_is_cancelled_when_node_0_dies_of_its_stopped_peer(app, client, anon):
    """A cancel stops each node's trainer as its worker hears of it: node 1 may stop first, and node 0's trainer
    then dies of the lost peer. That crash ends the attempt as cancelled (it once left the run cancelling)."""
    token, broker = worker_token(client), Broker()
    run, base = joined_gang(app, client, anon, token, broker)
    running = {"attempt": 1, "status": "running", "reason": "node 0 started"}
    assert anon.post(f"/api/v1/runs/{run['id']}/status", json=running, headers=auth(token)).status_code == 200
    assert client.post(f"/api/v1/runs/{run['id']}/cancel").json()["status"] == "cancelling"
    stopped = {"exit_code": -15, "reason": "stopped: the run is cancelling (attempt 1)"}
    assert anon.post(f"{base}/nodes/1/end", json=stopped, headers=auth(token)).status_code == 200
    assert client.get(f"/api/v1/runs/{run['id']}").json()["status"] == "cancelling"  # node 0 still has its say
    crashed = {"attempt": 1, "status": "failed", "reason": "trainer exited with 1: connection reset", "failure": "crashed"}
    assert anon.post(f"/api/v1/runs/{run['id']}/status", json=crashed, headers=auth(token)).status_code == 200
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    assert (detail["status"], detail["failure"]) == ("cancelled", None), detail
    [attempt] = detail["attempts"]
    assert attempt["end_reason"] == "node 0: trainer exited with 1: connection reset"
    assert [n["state"] for n in attempt["nodes"]] == ["ended", "ended"]


def test_a_silent_node_loses_the_attempt(app, client, anon, db):
    token, broker = worker_token(client), Broker()
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    run = gang_run(client, 2)
    reconcile = reconciler(app, broker, lost_after_s=5)
    reconcile.dispatch()
    reconcile._born = utcnow() - timedelta(minutes=5)  # this API has been up long enough to judge silence
    minute_ago = utcnow() - timedelta(seconds=60)  # granted a minute ago, and node-b silent since
    db.execute(update(AttemptNode).values(granted_at=minute_ago))
    db.execute(update(Worker).where(Worker.name == "node-b").values(last_heartbeat=minute_ago))
    db.commit()
    reconcile.find_lost()
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    assert detail["status"] == "queued"
    assert detail["attempts"][0]["end_reason"].startswith("lost: node 1 (worker node-b) sent no heartbeat for")


def test_a_node_whose_worker_is_back_without_the_run_loses_the_attempt(app, client, anon, db):
    """A node's worker restarted under its name (a cold stop, a crash) heartbeats holding nothing: the attempt is
    lost at once, although no node fell silent; heartbeats of both nodes holding the run end nothing."""
    token, broker = worker_token(client), Broker()
    run, _ = joined_gang(app, client, anon, token, broker)
    reconcile = reconciler(app, broker)
    for name in ("node-a", "node-b"):
        beat(anon, token, name, current_run_id=run["id"])
    db.execute(update(AttemptNode).values(joined_at=utcnow() - timedelta(seconds=30)))
    db.commit()
    reconcile.find_lost()
    assert client.get(f"/api/v1/runs/{run['id']}").json()["status"] in ("starting", "running")
    beat(anon, token, "node-b")  # back, holding nothing
    reconcile.find_lost()
    detail = client.get(f"/api/v1/runs/{run['id']}").json()
    assert detail["status"] == "queued", detail["status_reason"]
    assert detail["attempts"][0]["end_reason"] == (
        "lost: node 1 (worker node-b) is back without it (its heartbeats say it holds no run: restarted, or stopped at once)"
    )


def test_a_gang_the_queue_can_hold_keeps_newer_one_node_runs_off_its_workers(app, client, anon):
    token = worker_token(client)
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    older = create_run(client, name="older")
    gang = gang_run(client, 2)
    newer = create_run(client, name="newer")
    lease = lambda run: anon.post(f"/api/v1/runs/{run['id']}/lease", json={"worker": "node-a"}, headers=auth(token))  # noqa: E731
    assert lease(older).status_code == 200  # first come, first served
    refused = lease(newer)
    assert refused.status_code == 409 and f"held for run {gang['id']}, an older run that waits for 2 workers" in refused.text
    # A gang the queue cannot hold (3 nodes, 2 workers) holds nothing: runs behind it go on.
    client.post(f"/api/v1/runs/{gang['id']}/cancel")
    gang_run(client, 3)
    assert lease(create_run(client, name="behind")).status_code == 200


def test_workers_that_said_their_part_ended_are_granted_again_without_waiting_for_a_heartbeat(app, client, anon):
    token, broker = worker_token(client), Broker()
    first, base = joined_gang(app, client, anon, token, broker)
    for name in ("node-a", "node-b"):
        beat(anon, token, name, current_run_id=first["id"], current_attempt=1)
    second = gang_run(client, 2)
    anon.post(f"{base}/nodes/1/end", json={"exit_code": 0, "reason": "trainer exited with 0"}, headers=auth(token))
    done = {"attempt": 1, "status": "succeeded", "reason": "trainer exited 0 at step 20"}
    assert anon.post(f"/api/v1/runs/{first['id']}/status", json=done, headers=auth(token)).status_code == 200
    reconciler(app, broker).dispatch()  # no heartbeat since: the ends said the trainers exited
    assert client.get(f"/api/v1/runs/{second['id']}").json()["status"] == "starting"


def _nodes(client, run_id: int) -> dict[int, str]:
    [attempt] = client.get(f"/api/v1/runs/{run_id}").json()["attempts"][:1]
    return {n["node_rank"]: n["end_reason"] for n in attempt["nodes"]}


def test_a_killed_nodes_worker_is_named_first_though_node_0_reported_its_crash(app, client, anon, db):
    """Node 1's worker is killed (SIGKILL: its trainer dies with it) and node 0's trainer then dies of the lost peer:
    node 0's report ends the attempt at once. Node 1's row says it stopped with the attempt (not node 0's log lines);
    once its worker has been silent since before that end for lost_after_s, its row says the worker was lost and the
    attempt's reason names node 1 first. A node whose worker lives on stays "stopped with the attempt"."""
    token, broker = worker_token(client), Broker()
    run, _ = joined_gang(app, client, anon, token, broker)
    status = {"attempt": 1, "status": "running", "reason": "node 0 started"}
    anon.post(f"/api/v1/runs/{run['id']}/status", json=status, headers=auth(token))
    crash = "trainer exited with 1:\n[rank0]: torch.distributed.DistBackendError: Connection closed by peer"
    crashed = {"attempt": 1, "status": "failed", "reason": crash, "failure": "crashed", "exited_at": utcnow().isoformat()}
    assert anon.post(f"/api/v1/runs/{run['id']}/status", json=crashed, headers=auth(token)).status_code == 200
    nodes = _nodes(client, run["id"])
    assert nodes == {0: crash, 1: "stopped with the attempt (node 0: trainer exited with 1:)"}
    reconcile = reconciler(app, broker, lost_after_s=5)
    reconcile._born = utcnow() - timedelta(minutes=5)
    reconcile.find_lost()  # not silent for long enough yet
    assert _nodes(client, run["id"])[1].startswith("stopped with the attempt")
    # 6 s later by the clock of the rows: node-b last heartbeat 2 s before the end, nothing since
    ended = db.scalar(select(RunAttempt.ended_at).where(RunAttempt.run_id == run["id"]))
    db.execute(update(RunAttempt).where(RunAttempt.run_id == run["id"]).values(ended_at=ended - timedelta(seconds=6)))
    db.execute(update(Worker).where(Worker.name == "node-b").values(last_heartbeat=ended - timedelta(seconds=8)))
    db.commit()
    reconcile.find_lost()
    last = (ended - timedelta(seconds=8)).strftime("%H:%M:%S")
    assert _nodes(client, run["id"])[1] == f"its worker node-b was lost: no heartbeat since {last} UTC, before the attempt ended"
    [attempt] = client.get(f"/api/v1/runs/{run['id']}").json()["attempts"][:1]
    assert attempt["end_reason"].startswith(
        f"node 1 (worker node-b) failed first: its worker was lost (no heartbeat since {last} UTC); then node 0: trainer exited"
    ), attempt["end_reason"]


def test_a_late_report_of_an_earlier_crash_is_named_first(app, client, anon):
    """Node 1's trainer crashed first, but node 0's report of its own (the lost peer) reached the API first: node 1's
    report, late, replaces its "stopped with the attempt" with its own words, and having exited earlier (by its
    worker's clock), it is named first in the attempt's reason."""
    token, broker = worker_token(client), Broker()
    run, base = joined_gang(app, client, anon, token, broker)
    now = utcnow()
    crashed = {"attempt": 1, "status": "failed", "reason": "trainer exited with 1: peer gone", "exited_at": now.isoformat()}
    anon.post(f"/api/v1/runs/{run['id']}/status", json=crashed, headers=auth(token))
    oom = "trainer exited with 1:\n[rank1]: torch.OutOfMemoryError: CUDA out of memory"
    end = {"exit_code": 1, "reason": oom, "failure": "crashed", "exited_at": (now - timedelta(seconds=2)).isoformat()}
    assert anon.post(f"{base}/nodes/1/end", json=end, headers=auth(token)).status_code == 200
    assert _nodes(client, run["id"]) == {0: "trainer exited with 1: peer gone", 1: oom}
    [attempt] = client.get(f"/api/v1/runs/{run['id']}").json()["attempts"][:1]
    assert (
        attempt["end_reason"]
        == "node 1 (worker node-b) failed first: trainer exited with 1:; then node 0: trainer exited with 1: peer gone"
    )


def test_a_late_report_of_a_later_exit_names_nobody_first(app, client, anon):
    token, broker = worker_token(client), Broker()
    run, base = joined_gang(app, client, anon, token, broker)
    now = utcnow()
    crashed = {"attempt": 1, "status": "failed", "reason": "trainer exited with 1: peer gone", "exited_at": now.isoformat()}
    anon.post(f"/api/v1/runs/{run['id']}/status", json=crashed, headers=auth(token))
    end = {"exit_code": 1, "reason": "trainer exited with 1: stopped", "exited_at": (now + timedelta(seconds=2)).isoformat()}
    anon.post(f"{base}/nodes/1/end", json=end, headers=auth(token))
    [attempt] = client.get(f"/api/v1/runs/{run['id']}").json()["attempts"][:1]
    assert attempt["end_reason"] == "node 0: trainer exited with 1: peer gone"
    assert _nodes(client, run["id"])[1] == "trainer exited with 1: stopped"


def test_a_queued_runs_message_is_sent_again_only_while_its_queue_has_an_idle_worker(app, client, anon):
    """While every worker of the queue is busy (or none serves it) the first message waits in the broker: copies every
    redispatch_s would pile up behind it for as long as a backlog waits. An idle worker that has not taken it may have
    lost it (a flushed broker): then it is sent again."""
    token, broker = worker_token(client), Broker()
    tick = reconciler(app, broker)  # redispatch_s 0: every tick may send again

    def launched(run_id: int) -> int:
        return broker.sent.count(("runs.launch", [run_id], "cpu"))

    waiting = create_run(client, name="waiting", resources={"queue": "cpu"})
    for _ in range(3):
        tick.dispatch()
    assert launched(waiting["id"]) == 1  # no worker serves cpu: once
    beat(anon, token, "node-a")
    tick.dispatch()
    tick.dispatch()
    assert launched(waiting["id"]) == 3  # node-a idle and it is still queued: its message may be lost
    ahead = create_run(client, name="ahead", resources={"queue": "cpu"})
    base = f"/api/v1/runs/{ahead['id']}"
    assert anon.post(f"{base}/lease", json={"worker": "node-a"}, headers=auth(token)).status_code == 200
    started = anon.post(f"{base}/status", json={"attempt": 1, "status": "running"}, headers=auth(token))
    assert started.status_code == 200, started.text
    for _ in range(3):
        tick.dispatch()
    assert launched(waiting["id"]) == 3  # node-a busy: the message waits in the broker
    beat(anon, token, "node-b", queues=["gpu"])  # idle, but not on cpu
    tick.dispatch()
    assert launched(waiting["id"]) == 3


def test_a_gang_whose_stored_spec_no_longer_validates_waits_and_the_runs_behind_it_go(app, client, anon, db):
    from api.models import Run

    token, broker = worker_token(client), Broker()
    beat(anon, token, "node-a")
    beat(anon, token, "node-b")
    old = gang_run(client, 2)
    row = db.get(Run, old["id"])
    row.spec = {**row.spec, "resources": {**row.spec["resources"], "retired_knob": 1}}  # as an older version stored it
    db.commit()
    behind = create_run(client, name="behind", resources={"queue": "cpu"})
    reconciler(app, broker).dispatch()
    assert broker.sent == [("runs.launch", [behind["id"]], "cpu")]
    assert db.scalars(select(AttemptNode).where(AttemptNode.run_id == old["id"])).all() == []
