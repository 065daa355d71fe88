"""Samples across runs (GET /api/v1/samples, api/samples/compare.py): the same prompt side by side in several runs,
each at its latest sample step, at or before a step, at its best checkpoint by a metric, or at every step for one
prompt; filters on reward, truncation and a failed reward component; one request for the whole view."""

from api.models import Checkpoint
from tests.harness.factories import ApiWorker, auth, create_run, create_user


def sample(step: int, index: int, prompt: str, response: str, reward: float, **scores: float) -> dict:
    return {"step": step, "index": index, "prompt": prompt, "response": response, "reward": reward, "scores": scores}


def test_a_prompt_side_by_side_across_runs_at_each_runs_step(client, anon, db):
    worker = ApiWorker(client)
    a, b, c = (create_run(client, name=name)["id"] for name in ("grpo-a", "grpo-b", "no-samples"))
    worker.start(a)
    rows_a = [
        sample(10, 0, "1+1=", "2", 1.0, **{"reward/format": 1.0, "truncated": 0.0}),
        sample(10, 1, "2+2=", "5", 0.0, **{"reward/format": 0.0, "truncated": 0.0}),
        sample(20, 0, "1+1=", "two", 0.5, **{"reward/format": 1.0, "truncated": 1.0}),
        sample(20, 1, "3+3=", "6", 1.0, **{"reward/format": 1.0, "truncated": 0.0}),
    ]
    assert client.post(f"/api/v1/runs/{a}/samples", json=rows_a, headers=worker.headers).status_code == 200
    worker.log(a, "eval/accuracy", {10: 0.5, 20: 0.3})
    for step in (10, 20):
        db.add(Checkpoint(run_id=a, step=step, path=f"runs/{a}/{step}", size=1, sha256="0" * 64, meta={}))
    db.commit()
    client.post(f"/api/v1/runs/{a}/status", json={"attempt": 1, "status": "succeeded"}, headers=worker.headers)
    worker.client.post(f"/api/v1/runs/{b}/lease", json={"worker": "w1"}, headers=worker.headers)
    rows_b = [sample(15, 0, "1+1=", "2", 1.0), sample(30, 0, "1+1=", "11", 0.0), sample(30, 1, "5+5=", "10", 1.0)]
    assert client.post(f"/api/v1/runs/{b}/samples", json=rows_b, headers=worker.headers).status_code == 200

    view = client.get("/api/v1/samples", params={"runs": f"{a},{b},{c}"}).json()  # at=latest
    assert [(r["run_id"], r["step"], r["steps"], r["why"]) for r in view["runs"]] == [
        (a, 20, [10, 20], None),
        (b, 30, [15, 30], None),
        (c, None, [], "it logged no samples"),
    ]
    assert [p["prompt"] for p in view["prompts"]] == ["1+1=", "3+3=", "5+5="] and view["count"] == 3  # in both runs first
    both = view["prompts"][0]
    assert {run: [s["response"] for s in answers] for run, answers in both["samples"].items()} == {
        str(a): ["two"],
        str(b): ["11"],
    }

    before = client.get("/api/v1/samples", params={"runs": f"{a},{b}", "at": "step", "step": 16}).json()
    assert [r["step"] for r in before["runs"]] == [10, 15]
    best = client.get("/api/v1/samples", params={"runs": f"{a},{b}", "at": "best", "metric": "eval/accuracy"}).json()
    assert [(r["step"], r["why"]) for r in best["runs"]] == [
        (10, None),
        (None, "no checkpoint of it has eval/accuracy logged at its step"),
    ]

    followed = client.get("/api/v1/samples", params={"runs": f"{a},{b}", "at": "all", "prompt_hash": both["prompt_hash"]}).json()
    [prompt] = followed["prompts"]
    assert {run: [(s["step"], s["response"]) for s in answers] for run, answers in prompt["samples"].items()} == {
        str(a): [(10, "2"), (20, "two")],
        str(b): [(15, "2"), (30, "11")],
    }

    def responses(**filters) -> list[str]:
        found = client.get(
            "/api/v1/samples", params={"runs": f"{a},{b}", "at": "all", "prompt_hash": both["prompt_hash"], **filters}
        )
        return sorted(s["response"] for p in found.json()["prompts"] for answers in p["samples"].values() for s in answers)

    assert responses(reward_below=0.75) == ["11", "two"]
    assert responses(truncated=True) == ["two"]
    early = client.get("/api/v1/samples", params={"runs": str(a), "at": "step", "step": 10, "failed": "reward/format"}).json()
    assert [p["prompt"] for p in early["prompts"]] == ["2+2="]


def test_bad_requests_and_runs_you_cannot_read(client, anon):
    run = create_run(client)["id"]
    too_many = ",".join(str(i) for i in range(1, 23))
    assert client.get("/api/v1/samples", params={"runs": too_many}).status_code == 422
    no_step = client.get("/api/v1/samples", params={"runs": str(run), "at": "step"})
    assert no_step.status_code == 422 and no_step.json()["detail"][0]["loc"] == ["query", "step"]
    assert client.get("/api/v1/samples", params={"runs": str(run), "at": "all"}).json()["detail"][0]["loc"] == [
        "query",
        "prompt_hash",
    ]
    outsider = create_user(client, "oz", scopes=("read",))
    assert anon.get("/api/v1/samples", params={"runs": str(run)}, headers=auth(outsider)).status_code == 403
