"""Run logs (idempotent append, offset paging, tail, filters) and samples (per step, across steps by prompt)."""

import hashlib

import pytest
from sqlalchemy import func, select

from api.models import LogLine, Sample
from tests.harness.factories import create_run


def lines(n: int, *, attempt: int = 1, rank: int = 0, start: int = 0, text: str = "line {seq}") -> list[dict]:
    return [
        {"attempt": attempt, "rank": rank, "seq": s, "text": text.format(seq=s, rank=rank), "time": 1_700_000_000.0 + s}
        for s in range(start, start + n)
    ]


def post_logs(client, run_id: int, batch: list[dict]) -> dict:
    response = client.post(f"/api/v1/runs/{run_id}/logs", json=batch)
    assert response.status_code == 200, response.text
    return response.json()


def read_logs(client, run_id: int, **params) -> dict:
    response = client.get(f"/api/v1/runs/{run_id}/logs", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def log_rows(db, run_id: int) -> list[tuple]:
    db.expire_all()
    return db.execute(
        select(LogLine.attempt, LogLine.rank, LogLine.seq, LogLine.text).where(LogLine.run_id == run_id).order_by(LogLine.id)
    ).all()


class TestAppendLogs:
    def test_stores_lines_and_a_resent_batch_stores_nothing_new(self, client, db):
        run = create_run(client)
        batch = lines(5)
        assert post_logs(client, run["id"], batch) == {"accepted": 5, "duplicates": 0}
        stored = log_rows(db, run["id"])
        assert stored == [(1, 0, s, f"line {s}") for s in range(5)]
        assert post_logs(client, run["id"], batch) == {"accepted": 0, "duplicates": 5}
        assert log_rows(db, run["id"]) == stored

    def test_a_resent_line_with_other_text_keeps_the_first(self, client, db):
        run = create_run(client)
        post_logs(client, run["id"], lines(3))
        overlap = lines(2, start=2, text="changed {seq}")
        assert post_logs(client, run["id"], overlap) == {"accepted": 1, "duplicates": 1}
        assert [row[3] for row in log_rows(db, run["id"])] == ["line 0", "line 1", "line 2", "changed 3"]

    def test_the_key_is_attempt_rank_seq(self, client, db):
        run = create_run(client)
        batch = lines(2, attempt=1, rank=0) + lines(2, attempt=1, rank=1) + lines(2, attempt=2, rank=0)
        assert post_logs(client, run["id"], batch) == {"accepted": 6, "duplicates": 0}
        assert post_logs(client, run["id"], lines(2, attempt=1, rank=0)) == {"accepted": 0, "duplicates": 2}
        assert db.scalar(select(func.count()).select_from(LogLine)) == 6

    def test_duplicates_inside_one_batch_and_empty_batches(self, client, db):
        run = create_run(client)
        assert post_logs(client, run["id"], lines(1) + lines(1, text="again")) == {"accepted": 1, "duplicates": 1}
        assert post_logs(client, run["id"], []) == {"accepted": 0, "duplicates": 0}
        assert [row[3] for row in log_rows(db, run["id"])] == ["line 0"]

    def test_time_defaults_to_now_and_nul_becomes_a_replacement_character(self, client, db):
        run = create_run(client)
        post_logs(client, run["id"], [{"seq": 0, "text": "bin\x00ary"}])
        db.expire_all()
        line = db.scalar(select(LogLine).where(LogLine.run_id == run["id"]))
        assert line.attempt == 0 and line.rank == 0 and line.time > 1_700_000_000
        assert line.text == "bin\ufffdary"
        assert read_logs(client, run["id"], q="bin\ufffdary")["data"][0]["text"] == "bin\ufffdary"
        assert client.get(f"/api/v1/runs/{run['id']}/logs", params={"q": "bin\x00ary"}).status_code == 400  # not in URLs

    def test_unknown_run_is_404(self, client, db):
        response = client.post("/api/v1/runs/999/logs", json=lines(1))
        assert response.status_code == 404 and response.json() == {"detail": "run 999 not found"}
        assert client.get("/api/v1/runs/999/logs").status_code == 404
        assert db.scalar(select(func.count()).select_from(LogLine)) == 0


class TestReadLogs:
    def test_offset_paging_returns_every_line_once_in_order(self, client, db):
        run, other = create_run(client), create_run(client)
        for start in range(0, 25, 5):  # interleave with another run so ids are not contiguous
            post_logs(client, run["id"], lines(5, start=start))
            post_logs(client, other["id"], lines(3, start=start))
        seen, offset, pages = [], 0, 0
        while True:
            page = read_logs(client, run["id"], offset=offset, limit=7)
            if not page["data"]:
                assert page["next_offset"] == offset
                break
            assert page["next_offset"] == page["data"][-1]["id"] > offset
            seen += [line["seq"] for line in page["data"]]
            offset, pages = page["next_offset"], pages + 1
        assert seen == list(range(25)) and pages == 4

    def test_lines_written_after_a_read_follow_on_the_next_page(self, client, db):
        run = create_run(client)
        post_logs(client, run["id"], lines(3))
        first = read_logs(client, run["id"])
        post_logs(client, run["id"], lines(2, start=3))
        after = read_logs(client, run["id"], offset=first["next_offset"])
        assert [line["seq"] for line in after["data"]] == [3, 4]

    def test_tail_returns_the_last_lines_in_order(self, client, db):
        run = create_run(client)
        post_logs(client, run["id"], lines(20))
        tail = read_logs(client, run["id"], tail=3)
        assert [line["seq"] for line in tail["data"]] == [17, 18, 19]
        assert tail["next_offset"] == tail["data"][-1]["id"]
        assert [line["seq"] for line in read_logs(client, run["id"], tail=3, offset=10**6)["data"]] == [17, 18, 19]
        assert len(read_logs(client, run["id"], tail=100)["data"]) == 20

    def test_rank_filter(self, client, db):
        run = create_run(client)
        post_logs(client, run["id"], lines(3, rank=0) + lines(3, rank=1, text="r{rank} {seq}"))
        ranked = read_logs(client, run["id"], rank=1)["data"]
        assert [(line["rank"], line["text"]) for line in ranked] == [(1, "r1 0"), (1, "r1 1"), (1, "r1 2")]
        assert [line["seq"] for line in read_logs(client, run["id"], rank=1, tail=1)["data"]] == [2]

    def test_search_is_case_insensitive_and_literal(self, client, db):
        run = create_run(client)
        texts = ["step 1 loss=0.5", "WARNING: Loss spike", "100% done", "file_name ok", "filexname", "a\\b"]
        post_logs(client, run["id"], [{"seq": i, "text": t} for i, t in enumerate(texts)])

        def search(q, **params):
            return [line["text"] for line in read_logs(client, run["id"], q=q, **params)["data"]]

        assert search("LOSS") == ["step 1 loss=0.5", "WARNING: Loss spike"]
        assert search("%") == ["100% done"]
        assert search("e_n") == ["file_name ok"]
        assert search("\\") == ["a\\b"]
        assert search("loss", tail=1) == ["WARNING: Loss spike"]
        assert search("nothing like it") == []

    @pytest.mark.parametrize(
        "params",
        [{"offset": -1}, {"limit": 0}, {"limit": 10_001}, {"tail": 0}, {"rank": -1}, {"offset": 2**63}, {"q": "x" * 257}],
    )
    def test_bad_query_values_are_422(self, client, db, params):
        run = create_run(client)
        response = client.get(f"/api/v1/runs/{run['id']}/logs", params=params)
        assert response.status_code == 422 and response.json()["detail"][0]["loc"][0] == "query"


def sample(step: int, index: int = 0, prompt: str = "What is 2+2?", **fields) -> dict:
    body = {
        "step": step,
        "index": index,
        "prompt": prompt,
        "response": f"answer at {step}.{index}",
        "reward": step + index / 10,
        "kl": 0.01 * step,
        "scores": {"length": 12.0},
    }
    body.update(fields)
    return body


def post_samples(client, run_id: int, batch) -> dict:
    response = client.post(f"/api/v1/runs/{run_id}/samples", json=batch)
    assert response.status_code == 200, response.text
    return response.json()


def read_samples(client, run_id: int, **params) -> dict:
    response = client.get(f"/api/v1/runs/{run_id}/samples", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def sample_rows(db, run_id: int) -> list[tuple]:
    db.expire_all()
    return db.execute(
        select(Sample.step, Sample.index, Sample.prompt, Sample.response, Sample.reward, Sample.kl, Sample.scores)
        .where(Sample.run_id == run_id)
        .order_by(Sample.id)
    ).all()


def prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:32]


class TestAddSamples:
    def test_fields_round_trip(self, client, db):
        run = create_run(client)
        assert post_samples(client, run["id"], [sample(1), sample(1, index=1, scores={"a": 0.5, "b": -2.0})]) == {
            "accepted": 2,
            "duplicates": 0,
        }
        body = read_samples(client, run["id"])
        assert body["count"] == 2
        first = body["data"][0]
        assert (first["step"], first["index"], first["prompt"], first["response"]) == (1, 0, "What is 2+2?", "answer at 1.0")
        assert (first["reward"], first["kl"], first["scores"]) == (1.0, 0.01, {"length": 12.0})
        assert first["prompt_hash"] == prompt_hash("What is 2+2?") and first["time"] > 1_700_000_000
        assert body["data"][1]["scores"] == {"a": 0.5, "b": -2.0}
        assert sample_rows(db, run["id"])[1] == (1, 1, "What is 2+2?", "answer at 1.1", 1.1, 0.01, {"a": 0.5, "b": -2.0})

    def test_idempotent_on_step_and_index(self, client, db):
        run = create_run(client)
        post_samples(client, run["id"], [sample(1), sample(1, index=1)])
        stored = sample_rows(db, run["id"])
        again = [sample(1, response="different", reward=-5.0), sample(1, index=2)]
        assert post_samples(client, run["id"], again) == {"accepted": 1, "duplicates": 1}
        rows = sample_rows(db, run["id"])
        assert rows[:2] == stored and len(rows) == 3

    def test_optional_fields(self, client, db):
        run = create_run(client)
        post_samples(client, run["id"], [{"step": 3, "prompt": "p", "response": "r"}])
        [row] = read_samples(client, run["id"])["data"]
        assert (row["index"], row["reward"], row["kl"], row["scores"], row["turns"]) == (0, None, None, {}, None)

    def test_an_episodes_turns_round_trip_in_order_and_a_bad_turn_is_named(self, client, db):
        run = create_run(client)
        turns = [
            {"role": "policy", "text": "<calc>6*7</calc>"},
            {"role": "environment", "text": "<result>42</result>"},
            {"role": "policy", "text": "42"},
        ]
        post_samples(
            client, run["id"], [{"step": 1, "prompt": "6*7=", "response": "".join(t["text"] for t in turns), "turns": turns}]
        )
        [row] = read_samples(client, run["id"])["data"]
        assert row["turns"] == turns
        db.expire_all()
        assert db.scalar(select(Sample.turns).where(Sample.run_id == run["id"])) == turns
        bad = client.post(
            f"/api/v1/runs/{run['id']}/samples",
            json=[{"step": 2, "prompt": "p", "response": "r", "turns": [{"role": "tool", "text": "x"}]}],
        )
        assert bad.status_code == 422, bad.text
        assert bad.json()["detail"][0]["loc"] == ["body", 0, "turns", 0, "role"]
        assert bad.json()["detail"][0]["msg"] == "Input should be 'policy' or 'environment'"
        assert len(read_samples(client, run["id"])["data"]) == 1  # nothing of the refused batch is stored

    def test_non_finite_rewards_and_scores_read_back_as_such(self, client, db):
        run = create_run(client)
        body = (
            '[{"step": 1, "prompt": "p", "response": "r", "reward": NaN, "kl": "NaN", "scores": {"x": NaN, "y": 1}},'
            ' {"step": 2, "prompt": "p", "response": "r", "reward": "Infinity", "kl": -Infinity}]'
        )
        response = client.post(f"/api/v1/runs/{run['id']}/samples", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 200 and response.json() == {"accepted": 2, "duplicates": 0}
        data = read_samples(client, run["id"])["data"]
        assert (data[0]["reward"], data[0]["kl"], data[0]["scores"]) == ("NaN", "NaN", {"x": "NaN", "y": 1.0})
        assert (data[1]["reward"], data[1]["kl"]) == ("Infinity", "-Infinity")
        rows = sample_rows(db, run["id"])
        assert rows[0][4] is None and rows[0][5] is None and rows[1][4] == float("inf")

    def test_nul_in_text_becomes_a_replacement_character(self, client, db):
        run = create_run(client)
        post_samples(client, run["id"], [sample(1, prompt="p\x00", response="r\x00", scores={"k\x00": 1.0})])
        [row] = read_samples(client, run["id"])["data"]
        assert (row["prompt"], row["response"], row["scores"]) == ("p\ufffd", "r\ufffd", {"k\ufffd": 1.0})
        assert row["prompt_hash"] == prompt_hash("p\ufffd")

    def test_unknown_run_is_404(self, client, db):
        assert client.post("/api/v1/runs/999/samples", json=[sample(1)]).status_code == 404
        assert client.get("/api/v1/runs/999/samples").status_code == 404
        assert client.get("/api/v1/runs/999/samples/prompts").status_code == 404
        assert db.scalar(select(func.count()).select_from(Sample)) == 0


class TestQuerySamples:
    @pytest.fixture
    def run_id(self, client, db) -> int:
        run = create_run(client)
        batch = [sample(step, index=i, prompt=f"prompt {i}", reward=float(step * 10 + i)) for step in (3, 1, 2) for i in range(2)]
        batch.append(sample(4, reward=None, prompt="prompt 0"))
        post_samples(client, run["id"], batch)
        return run["id"]

    def test_by_step_and_step_range(self, client, run_id):
        at_two = read_samples(client, run_id, step=2)
        assert at_two["count"] == 2 and [(s["step"], s["index"]) for s in at_two["data"]] == [(2, 0), (2, 1)]
        ranged = read_samples(client, run_id, step_min=2, step_max=3)
        assert [(s["step"], s["index"]) for s in ranged["data"]] == [(2, 0), (2, 1), (3, 0), (3, 1)]
        assert read_samples(client, run_id, step_min=4)["count"] == 1
        assert read_samples(client, run_id, step=9) == {"data": [], "count": 0}

    def test_one_prompt_across_steps_in_step_order(self, client, run_id):
        across = read_samples(client, run_id, prompt_hash=prompt_hash("prompt 1"))
        assert across["count"] == 3
        assert [s["response"] for s in across["data"]] == ["answer at 1.1", "answer at 2.1", "answer at 3.1"]
        assert all(s["prompt"] == "prompt 1" for s in across["data"])

    def test_sort_by_reward(self, client, run_id):
        best = read_samples(client, run_id, sort="-reward")["data"]
        assert [s["reward"] for s in best] == [31.0, 30.0, 21.0, 20.0, 11.0, 10.0, None]  # no reward sorts last
        worst = read_samples(client, run_id, sort="reward", limit=2)
        assert [s["reward"] for s in worst["data"]] == [10.0, 11.0] and worst["count"] == 7
        assert [s["step"] for s in read_samples(client, run_id, sort="-step", limit=1)["data"]] == [4]

    def test_paging(self, client, run_id):
        pages = [read_samples(client, run_id, limit=3, offset=o)["data"] for o in (0, 3, 6)]
        assert [(s["step"], s["index"]) for page in pages for s in page] == [
            (1, 0),
            (1, 1),
            (2, 0),
            (2, 1),
            (3, 0),
            (3, 1),
            (4, 0),
        ]

    def test_distinct_prompts_with_their_hash(self, client, run_id):
        body = client.get(f"/api/v1/runs/{run_id}/samples/prompts").json()
        assert body["count"] == 2
        expected = [
            {"prompt_hash": prompt_hash("prompt 0"), "prompt": "prompt 0", "samples": 4, "first_step": 1, "last_step": 4},
            {"prompt_hash": prompt_hash("prompt 1"), "prompt": "prompt 1", "samples": 3, "first_step": 1, "last_step": 3},
        ]
        assert body["data"] == sorted(expected, key=lambda p: p["prompt_hash"])  # same first step: by hash

    @pytest.mark.parametrize(
        "params",
        [
            {"sort": "prompt"},
            {"step": -1},
            {"step": 2**63},
            {"limit": 0},
            {"offset": 2**63},
            {"prompt_hash": "not-hex"},
            {"prompt_hash": "a" * 65},
        ],
    )
    def test_bad_query_values_are_422(self, client, run_id, params):
        response = client.get(f"/api/v1/runs/{run_id}/samples", params=params)
        assert response.status_code == 422 and response.json()["detail"][0]["loc"][0] == "query"
