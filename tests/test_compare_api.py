"""Compare's batched requests (api/compare): every compared run's detail and metric keys in one poll, only the keys
that changed since each run's cursor; the charts' series of several runs in one request, each whole or from after
the step the client holds; a run the caller cannot read or that does not exist named in place, never failing the
others; bad cursors and oversized asks refused naming the field."""

from tests.harness.factories import ApiWorker, auth, create_project, create_run, create_user


def cursors(answer: dict) -> str:
    return ",".join(f"{r['id']}:{r['keys']['cursor']}" for r in answer["runs"] if r["keys"])


def test_one_poll_gives_every_runs_detail_and_only_the_keys_that_changed(client, anon):
    worker = ApiWorker(client)
    a, b = create_run(client, name="cmp-a")["id"], create_run(client, name="cmp-b")["id"]
    worker.start(a)
    worker.log(a, "train/loss", {1: 2.0, 2: 1.5})
    worker.log(a, "eval/accuracy", {2: 0.25})
    missing = 999_999
    create_project(client, "elsewhere")
    outsider_run = create_run(client, name="theirs", project="elsewhere")["id"]
    reader = create_user(client, "rita", roles={"default": "viewer"}, scopes=("read",))

    first = anon.get("/api/v1/compare", params={"runs": f"{a},{b},{missing},{outsider_run}"}, headers=auth(reader))
    assert first.status_code == 200, first.text
    runs = first.json()["runs"]
    assert [r["id"] for r in runs] == [a, b, missing, outsider_run]
    assert runs[0]["run"]["name"] == "cmp-a" and runs[0]["run"]["status"] == "running" and runs[0]["error"] is None
    assert runs[0]["keys"]["full"] and runs[0]["keys"]["count"] == 3
    assert {k["key"]: (k["count"], k["last_step"], k["last_value"]) for k in runs[0]["keys"]["data"]} == {
        "train/loss": (2, 2, 1.5),
        "eval/accuracy": (1, 2, 0.25),
    }
    assert runs[1]["keys"] == {"cursor": "0:-1", "full": True, "count": 0, "data": []}
    assert runs[2]["run"] is None and runs[2]["error"] == {"status": 404, "detail": f"run {missing} not found"}
    assert runs[3]["run"] is None and runs[3]["error"]["status"] == 403 and runs[3]["keys"] is None

    unchanged = anon.get("/api/v1/compare", params={"runs": f"{a},{b}", "cursors": cursors(first.json())}, headers=auth(reader))
    assert [(r["keys"]["full"], r["keys"]["data"]) for r in unchanged.json()["runs"]] == [(False, []), (False, [])]

    worker.log(a, "train/loss", {3: 1.25})
    since = anon.get("/api/v1/compare", params={"runs": str(a), "cursors": cursors(unchanged.json())}, headers=auth(reader))
    [delta] = [r["keys"] for r in since.json()["runs"]]
    assert not delta["full"] and delta["count"] == 4 and delta["cursor"] == "4:3"
    assert [(k["key"], k["count"], k["last_step"]) for k in delta["data"]] == [("train/loss", 3, 3)]

    # A point at an earlier step (eval/accuracy at 1) leaves the last step where it was: the delta cannot name its
    # key, and its count (5) tells the client that its merged counts (4) fall short, so it asks without a cursor.
    worker.log(a, "eval/accuracy", {1: 0.1})
    late = anon.get("/api/v1/compare", params={"runs": str(a), "cursors": cursors(since.json())}, headers=auth(reader))
    [delta] = [r["keys"] for r in late.json()["runs"]]
    assert delta["count"] == 5 and delta["data"] == []


def test_several_runs_series_whole_or_from_a_step(client):
    worker = ApiWorker(client)
    a, b = create_run(client, name="s-a")["id"], create_run(client, name="s-b")["id"]
    worker.start(a)
    worker.log(a, "train/loss", {step: 10.0 - step for step in range(1, 11)})
    worker.log(a, "weird", {1: "NaN", 2: 1.0})
    worker.start(b)
    worker.log(b, "train/loss", {step: float(step) for step in range(1, 31)})

    asked = {
        "max_points": 10,
        "series": [
            {"run_id": a, "key": "train/loss"},
            {"run_id": a, "key": "train/loss", "after_step": 8},
            {"run_id": a, "key": "weird", "after_step": 0},
            {"run_id": b, "key": "train/loss", "after_step": 5},  # 25 new points > max_points: the whole series
            {"run_id": b, "key": "never-logged", "after_step": 3},
        ],
    }
    answer = client.post("/api/v1/compare/series", json=asked)
    assert answer.status_code == 200, answer.text
    whole, tail, weird, replaced, empty = answer.json()["series"]
    assert (whole["run_id"], whole["after_step"], whole["step"], whole["downsampled"]) == (a, None, list(range(1, 11)), False)
    assert (tail["after_step"], tail["step"], tail["value"], tail["total_points"]) == (8, [9, 10], [1.0, 0.0], 2)
    assert weird["value"] == ["NaN", 1.0] and "first_nan_step" not in weird  # raw points: it follows from the value
    assert replaced["run_id"] == b and replaced["after_step"] is None and replaced["downsampled"]
    assert replaced["total_points"] == 30 and replaced["step"][-1] == 30 and len(replaced["step"]) <= 10
    assert (empty["key"], empty["step"], empty["after_step"]) == ("never-logged", [], 3)


def test_a_chart_of_many_runs_is_read_in_a_few_statements(app, client):
    """A 20-run chart's key and a poll's appends of them all: the series that fit in max_points are read together (the
    points in one statement, their sizes in one for the whole series and one for the appends), not two or three
    statements a series; each answer equals the one the run's own series request gives."""
    from sqlalchemy import event

    worker = ApiWorker(client)
    runs = [create_run(client, name=f"many-{i}")["id"] for i in range(20)]
    for i, run_id in enumerate(runs):
        worker.start(run_id)
        worker.log(run_id, "reward/mean", {step: step / (i + 1) for step in range(1, 41)})
    worker.log(runs[3], "reward/mean", {41: "NaN"})
    wholes = [{"run_id": run_id, "key": "reward/mean"} for run_id in runs]
    appends = [{"run_id": run_id, "key": "reward/mean", "after_step": 30} for run_id in runs]
    statements: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        if "FROM metric" in statement:
            statements.append(statement)

    for asked in (wholes, appends):
        statements.clear()
        event.listen(app.state.engine, "before_cursor_execute", seen)
        try:
            answer = client.post("/api/v1/compare/series", json={"max_points": 100, "series": asked})
        finally:
            event.remove(app.state.engine, "before_cursor_execute", seen)
        assert answer.status_code == 200, answer.text
        assert len(statements) == 2, statements  # the sizes, then the points
        for got, want in zip(answer.json()["series"], asked, strict=True):
            alone = client.get(
                f"/api/v1/runs/{want['run_id']}/metrics/columns",
                # a step range: read on its own, one key at a time, as before the batches
                params={
                    "keys": "reward/mean",
                    "max_points": 100,
                    "step_max": 10**6,
                    **({"step_min": 31} if "after_step" in want else {}),
                },
            ).json()["series"][0]
            assert {k: got[k] for k in alone} == alone
            assert got["after_step"] == want.get("after_step")
    nan_run = answer.json()["series"][3]
    assert nan_run["step"] == list(range(31, 42)) and nan_run["value"][-1] == "NaN"
    # A run page's first request (every key of the run) likewise: its keys' points in one statement.
    worker.log(runs[0], "train/loss", {step: 1.0 / step for step in range(1, 501)})  # 500 > max_points: downsampled
    for i in range(10):
        worker.log(runs[0], f"z/{i}", {1: float(i)})
    statements.clear()
    event.listen(app.state.engine, "before_cursor_execute", seen)
    try:
        page = client.get(f"/api/v1/runs/{runs[0]}/metrics/columns", params={"max_points": 100}).json()["series"]
    finally:
        event.remove(app.state.engine, "before_cursor_execute", seen)
    got = [(s["key"], s["downsampled"], s["total_points"]) for s in page]
    assert got == [("reward/mean", False, 40), ("train/loss", True, 500), *((f"z/{i}", False, 1) for i in range(10))]
    assert len(statements) <= 6, statements  # the key list, the sizes, the points; the long series on its own (3; 3 a key before)


def test_bad_asks_and_unreadable_runs_are_refused_naming_the_field(client, anon):
    run = create_run(client)["id"]
    too_many = ",".join(str(i) for i in range(1, 102))
    assert client.get("/api/v1/compare", params={"runs": too_many}).status_code == 422
    for bad in ("x", f"{run}:1", f"{run}:-1:3", "0:1:1"):
        refused = client.get("/api/v1/compare", params={"runs": str(run), "cursors": bad})
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", "cursors"], bad
    empty = client.post("/api/v1/compare/series", json={"series": []})
    assert empty.status_code == 422 and empty.json()["detail"][0]["loc"] == ["body", "series"]
    huge = {"series": [{"run_id": run, "key": f"k{i}"} for i in range(2001)]}
    assert client.post("/api/v1/compare/series", json=huge).status_code == 422
    negative = client.post("/api/v1/compare/series", json={"series": [{"run_id": run, "key": "k", "after_step": -1}]})
    assert negative.status_code == 422 and negative.json()["detail"][0]["loc"][-1] == "after_step"
    missing = client.post("/api/v1/compare/series", json={"series": [{"run_id": 999_999, "key": "k"}]})
    assert missing.status_code == 404 and missing.json()["detail"] == "run 999999 not found"
    outsider = create_user(client, "oz", scopes=("read",))
    theirs = anon.post("/api/v1/compare/series", json={"series": [{"run_id": run, "key": "k"}]}, headers=auth(outsider))
    assert theirs.status_code == 403
