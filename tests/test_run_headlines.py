"""The runs list carries each run's headline metric, read for the whole page (not one request per row)."""

from contextlib import contextmanager

from sqlalchemy import event

from api.runs.headlines import page_headlines
from tests.harness.factories import create_run


def _log(client, run_id, key, steps, value=lambda step: step / 10):
    points = [{"key": key, "step": s, "value": value(s), "time": 1_700_000_000.0 + s} for s in steps]
    response = client.post(f"/api/v1/runs/{run_id}/metrics", json=points)
    assert response.status_code == 200, response.text


def _listed(client, **params) -> dict[int, dict]:
    response = client.get("/api/v1/runs", params=params)
    assert response.status_code == 200, response.text
    return {run["id"]: run for run in response.json()["data"]}


@contextmanager
def _statements(engine):
    seen: list[str] = []

    def count(conn, cursor, statement, *args):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


class TestListHeadlines:
    def test_each_run_shows_its_preferred_key_at_its_last_step(self, client, db):
        quiet, trained, evaluated = (create_run(client, name=n)["id"] for n in ("quiet", "trained", "evaluated"))
        # Over 1,100 steps: the last point is in the third rollup block, and steps arrive out of order.
        _log(client, trained, "train/loss", [*range(600, 1100), *range(600)])
        _log(client, evaluated, "train/loss", range(50))
        _log(client, evaluated, "eval/loss", [10, 40, 20], value=lambda step: 1 / step)
        _log(client, evaluated, "train/lr", range(60))

        runs = _listed(client)
        assert runs[quiet]["headline"] is None
        assert runs[trained]["headline"] == {"key": "train/loss", "step": 1099, "value": 109.9}
        assert runs[evaluated]["headline"] == {"key": "eval/loss", "step": 40, "value": 0.025}

        _log(client, evaluated, "eval/loss", [80], value=lambda step: -2.5)
        assert _listed(client)[evaluated]["headline"] == {"key": "eval/loss", "step": 80, "value": -2.5}

    def test_a_non_finite_last_value_is_spelled_as_the_api_spells_it(self, client, db):
        run = create_run(client)["id"]
        _log(client, run, "train/loss", [1, 2])
        body = '[{"key": "train/loss", "step": 3, "value": NaN}]'
        response = client.post(f"/api/v1/runs/{run}/metrics", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 200, response.text
        assert _listed(client)[run]["headline"] == {"key": "train/loss", "step": 3, "value": "NaN"}

    def test_a_page_reads_its_headlines_in_the_same_number_of_queries_for_one_run_as_for_twelve(self, client, db, app):
        def statements_for_a_page(limit: int) -> int:
            with _statements(app.state.engine) as seen:
                assert len(_listed(client, limit=limit)) == limit
            return len(seen)

        for i in range(12):  # the newest, first on the page, has none of its named keys: both queries run
            run = create_run(client, name=f"r{i}")["id"]
            _log(client, run, "critic/loss" if i % 2 else "train/loss", range(5))
        assert statements_for_a_page(12) == statements_for_a_page(1)


# (algorithm, keys logged, the headline): the dashboard showed these before the list carried them.
PICKS = [
    ("sft", ["train/loss", "eval/loss"], "eval/loss"),
    ("sft", ["train/loss", "train/lr"], "train/loss"),
    ("reward", ["train/loss", "eval/accuracy", "eval/loss"], "eval/accuracy"),
    ("dpo", ["rewards/chosen", "rewards/margin", "train/loss"], "rewards/margin"),
    ("dpo", ["rewards/chosen", "rewards/margin", "eval/loss"], "eval/loss"),
    ("ppo", ["train/loss", "ppo/kl", "reward/mean"], "reward/mean"),
    ("grpo", ["reward/mean", "eval/accuracy"], "reward/mean"),
    ("ilql", ["train/loss", "eval/loss", "eval/reward", "eval/optimality"], "eval/optimality"),
    ("ilql", ["train/loss", "eval/loss"], "train/loss"),
    # None of its algorithm's keys: the first key by name that ends in "loss", not the first named one.
    ("ppo", ["eval/loss", "critic/loss", "ppo/kl"], "critic/loss"),
    ("ppo", ["ppo/kl"], None),
    # Exactly "loss": SQLite's LIKE would also match other cases.
    ("ppo", ["value/LOSS", "value/loss"], "value/loss"),
    ("an-algorithm-from-later", ["train/loss", "reward/mean"], "reward/mean"),
]


def test_the_headline_each_algorithm_shows(client, db):
    runs = []
    for algorithm, keys, _ in PICKS:
        run = create_run(client)["id"]
        for key in keys:
            _log(client, run, key, range(3))
        runs.append((run, algorithm))
    shown = page_headlines(db, runs)
    assert [h.key if h else None for h in (shown[run] for run, _ in runs)] == [expected for _, _, expected in PICKS]
