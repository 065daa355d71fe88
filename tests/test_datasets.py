"""Datasets: upload (JSONL and Parquet) validated against their kind, stored under the artifact root; size limits."""

import hashlib
import io
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from api.models import Dataset
from tests.harness.factories import create_project

SFT_ROWS = [
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
    {"text": "plain text row"},
    {"prompt": "2+2=", "completion": "4"},
]
PREFERENCE_ROWS = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(5)]


def jsonl(rows) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def parquet(columns: dict) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def upload(client, filename: str, content, kind: str = "sft", **form):
    return client.post("/api/v1/datasets", files={"file": (filename, content)}, data={"kind": kind, **form})


@pytest.fixture(autouse=True)
def datasets_dir(artifacts_root):
    """Dataset ids restart with every clean database, so start each test without earlier tests' files."""
    shutil.rmtree(artifacts_root / "datasets", ignore_errors=True)
    return artifacts_root / "datasets"


def stored_files(datasets_dir) -> list[str]:
    return sorted(p.relative_to(datasets_dir).as_posix() for p in datasets_dir.rglob("*") if p.is_file())


def assert_nothing_stored(db, datasets_dir) -> None:
    assert db.scalar(select(func.count()).select_from(Dataset)) == 0
    assert stored_files(datasets_dir) == []


class TestUpload:
    def test_jsonl_sft(self, client, db, artifacts_root):
        content = jsonl(SFT_ROWS)
        response = upload(client, "chat.jsonl", content)
        assert response.status_code == 201, response.text
        body = response.json()
        assert body["source"] == f"dataset:{body['id']}" and body["project"] == "default"
        assert (body["name"], body["kind"], body["format"]) == ("chat.jsonl", "sft", "jsonl")
        assert body["rows"] == 3 and body["columns"] == ["messages", "text", "prompt", "completion"]
        assert body["size"] == len(content) and body["sha256"] == hashlib.sha256(content).hexdigest()
        row = db.get(Dataset, body["id"])
        assert row.path == f"datasets/{body['id']}/chat.jsonl" and row.rows == 3
        assert (artifacts_root / row.path).read_bytes() == content

    def test_parquet_preference_with_name_and_project(self, client, db, artifacts_root):
        create_project(client, "alignment")
        content = parquet({key: [row[key] for row in PREFERENCE_ROWS] for key in ("prompt", "chosen", "rejected")})
        response = upload(client, "prefs.parquet", content, kind="preference", project="alignment", name="hh-prefs")
        assert response.status_code == 201, response.text
        body = response.json()
        assert (body["name"], body["project"], body["format"], body["rows"]) == ("hh-prefs", "alignment", "parquet", 5)
        assert body["columns"] == ["prompt", "chosen", "rejected"]
        assert body["sha256"] == hashlib.sha256(content).hexdigest()
        assert (artifacts_root / db.get(Dataset, body["id"]).path).read_bytes() == content

    def test_preference_answers_may_be_message_lists(self, client, db):
        row = {"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"}
        assert upload(client, "p.jsonl", jsonl([row]), kind="preference").status_code == 201

    def test_prompts_and_blank_lines(self, client, db):
        content = b'{"prompt": "a"}\n\n   \n{"prompt": "b", "meta": 1}\n'
        body = upload(client, "prompts.JSONL", content, kind="prompts").json()
        assert body["rows"] == 2 and body["columns"] == ["prompt", "meta"] and body["format"] == "jsonl"

    def test_an_upload_over_the_json_limit_but_under_the_upload_limit_is_fine(self, client, db):
        content = jsonl([{"text": "x" * 1000}] * 2048)  # ~2 MiB: over max_body_bytes, under max_upload_bytes
        assert len(content) > 1024 * 1024
        response = upload(client, "big.jsonl", content)
        assert response.status_code == 201 and response.json()["rows"] == 2048

    def test_nul_in_names_is_stored_as_a_replacement_character(self, client, db):
        content = b'{"text": "emoji \\ud83d\\ude00", "k\\u0000": 1}\n'
        body = upload(client, "s.jsonl", content, name="a\x00b").json()
        assert body["name"] == "a\ufffdb" and body["columns"] == ["text", "k\ufffd"]
        db.expire_all()
        assert db.get(Dataset, body["id"]).columns == ["text", "k\ufffd"]
        assert client.get(f"/api/v1/datasets/{body['id']}/preview").json()["rows"] == [{"text": "emoji \U0001f600", "k\x00": 1}]

    def test_a_path_in_the_filename_is_dropped(self, client, db, artifacts_root):
        body = upload(client, "../../evil name.jsonl", jsonl(SFT_ROWS)).json()
        path = db.get(Dataset, body["id"]).path
        assert path == f"datasets/{body['id']}/evil_name.jsonl" and (artifacts_root / path).is_file()


def _messages(response) -> list[str]:
    assert response.status_code == 422, response.text
    return [error["msg"] for error in response.json()["detail"]]


class TestValidation:
    def test_preference_row_missing_chosen_names_row_and_column(self, client, db, datasets_dir):
        rows = [PREFERENCE_ROWS[0], {"prompt": "q", "rejected": "r"}, PREFERENCE_ROWS[1]]
        response = upload(client, "p.jsonl", jsonl(rows), kind="preference")
        assert _messages(response) == ["row 2, column 'chosen': is missing; the file's columns are prompt, chosen, rejected"]
        assert response.json()["detail"][0]["loc"] == ["body", "file", "row 2", "chosen"]
        assert_nothing_stored(db, datasets_dir)

    def test_sft_row_without_any_text_column(self, client, db, datasets_dir):
        response = upload(client, "s.jsonl", jsonl([SFT_ROWS[1], {"answer": "x"}]))
        [message] = _messages(response)
        assert message.startswith("row 2") and "'messages', 'text', or 'prompt' and 'completion'" in message
        assert_nothing_stored(db, datasets_dir)

    def test_sft_prompt_without_completion_and_bad_messages(self, client, db, datasets_dir):
        rows = [{"prompt": "p"}, {"messages": [{"role": "user"}]}, {"text": 5}]
        messages = _messages(upload(client, "s.jsonl", jsonl(rows)))
        assert messages == [
            "row 1, column 'completion': is missing; the file's columns are prompt, messages, text",
            "row 2, column 'messages': must be a non-empty list of {role, content} objects",
            "row 3, column 'text': must be a string, got int",
        ]
        assert_nothing_stored(db, datasets_dir)

    def test_a_line_that_is_not_json(self, client, db, datasets_dir):
        content = jsonl(SFT_ROWS) + b'{"text": "unterminated\n' + b"[1, 2]\n"
        messages = _messages(upload(client, "s.jsonl", content))
        assert messages[0].startswith("row 4: is not valid JSON")
        assert messages[1] == "row 5: must be a JSON object, got list"
        assert_nothing_stored(db, datasets_dir)

    def test_a_lone_surrogate_escape_is_not_text(self, client, db, datasets_dir):
        content = b'{"text": "ok \\ud83d\\ude00"}\n{"text": "bad \\ud800"}\n{"text": "x", "\\uDC00": 1}\n'
        messages = _messages(upload(client, "s.jsonl", content))
        assert [m.split(":")[0] for m in messages] == ["row 2", "row 3"] and "surrogates not allowed" in messages[0]
        assert_nothing_stored(db, datasets_dir)

    def test_parquet_rows_name_the_column(self, client, db, datasets_dir):
        content = parquet({"prompt": ["a", "b"], "chosen": ["x", None], "rejected": [1, 2]})
        messages = _messages(upload(client, "p.parquet", content, kind="preference"))
        assert (
            "column 'rejected' in 2 of 2 rows (rows 1, 2): must be a string or a list of {role, content} messages, got int"
            in messages
        )
        assert "row 2, column 'chosen': must be a string or a list of {role, content} messages, got NoneType" in messages
        assert_nothing_stored(db, datasets_dir)

    def test_a_problem_every_row_shares_is_said_once_with_the_columns_found(self, client, db, datasets_dir):
        response = upload(client, "s.jsonl", jsonl([{"prompt": f"q{i}", "answer": "a"} for i in range(50)]))
        assert _messages(response) == [
            "column 'completion' in 50 of 50 rows (rows 1, 2, 3, 4, 5, ...): is missing; the file's columns are prompt, answer"
        ]
        assert response.json()["detail"][0]["loc"] == ["body", "file", "completion"]

    def test_errors_stop_at_twenty(self, client, db, datasets_dir):
        content = b"".join(b'{"text": "unterminated\n' for _ in range(50))
        messages = _messages(upload(client, "s.jsonl", content))
        assert len(messages) == 20 and messages[-1].startswith("row 20")

    def test_every_format_the_trainer_reads_is_accepted(self, client, db, datasets_dir):
        """sft rows as prompt/response (the trainer's default data.columns), and a .json array of rows."""
        rows = [{"prompt": "1+1=", "response": "2"}, {"prompt": "2+2=", "response": "4"}]
        body = upload(client, "pr.jsonl", jsonl(rows)).json()
        assert body["rows"] == 2 and body["columns"] == ["prompt", "response"], body
        array = upload(client, "pr.json", json.dumps(rows).encode()).json()
        assert array["rows"] == 2 and array["format"] == "json", array
        not_array = upload(client, "o.json", b'{"prompt": "p"}')
        assert _messages(not_array) == ["row 0: a .json data file must hold an array of row objects, not a dict"]

    @pytest.mark.parametrize("filename", ["data.csv", "data", "data.jsonl.gz", ".jsonl"])
    def test_wrong_extension(self, client, db, datasets_dir, filename):
        response = upload(client, filename, jsonl(SFT_ROWS))
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["body", "file"] and ".jsonl, .json or .parquet" in error["msg"]
        assert_nothing_stored(db, datasets_dir)

    @pytest.mark.parametrize(
        "filename, content, expected",
        [
            ("empty.jsonl", b"", "row 0: the file has no rows"),
            ("blank.jsonl", b"\n  \n\n", "row 0: the file has no rows"),
            ("zero-rows.parquet", parquet({"text": pa.array([], pa.string())}), "row 0: the file has no rows"),
            ("empty.parquet", b"", "row 0: cannot read the file as parquet"),
        ],
    )
    def test_empty_files(self, client, db, datasets_dir, filename, content, expected):
        [message] = _messages(upload(client, filename, content))
        assert message.startswith(expected)
        assert_nothing_stored(db, datasets_dir)

    @pytest.mark.parametrize(
        "content",
        [
            b"PAR1 this is not really parquet PAR1",
            b"\x00" * 4096,
            jsonl(SFT_ROWS),
            parquet({"text": ["a"] * 100})[:-20],
        ],
    )
    def test_corrupt_parquet_is_422(self, client, db, datasets_dir, content):
        [message] = _messages(upload(client, "bad.parquet", content))
        assert "cannot read the file as parquet" in message
        assert_nothing_stored(db, datasets_dir)

    def test_unknown_kind_and_project(self, client, db, datasets_dir):
        bad_kind = upload(client, "s.jsonl", jsonl(SFT_ROWS), kind="rlhf")
        assert bad_kind.status_code == 422 and bad_kind.json()["detail"][0]["loc"] == ["body", "kind"]
        no_project = upload(client, "s.jsonl", jsonl(SFT_ROWS), project="nope")
        assert no_project.status_code == 404 and "nope" in no_project.json()["detail"]
        bad_project = upload(client, "s.jsonl", jsonl(SFT_ROWS), project="a\x00b")
        assert bad_project.status_code == 422 and bad_project.json()["detail"][0]["loc"] == ["body", "project"]
        missing_file = client.post("/api/v1/datasets", data={"kind": "sft"})
        assert missing_file.status_code == 422 and missing_file.json()["detail"][0]["loc"] == ["body", "file"]
        assert_nothing_stored(db, datasets_dir)


class TestSizeLimit:
    LIMIT = 4 * 1024 * 1024

    def test_declared_length_over_the_limit_is_413(self, client, db, datasets_dir):
        content = jsonl([{"text": "x" * 1000}] * 4300)
        assert len(content) > self.LIMIT
        response = upload(client, "big.jsonl", content)
        assert response.status_code == 413
        assert response.json() == {"detail": f"request body larger than {self.LIMIT} bytes"}
        assert_nothing_stored(db, datasets_dir)

    def test_chunked_body_over_the_limit_is_413(self, client, db, datasets_dir):
        boundary = "rlplane-test-boundary"
        line = json.dumps({"text": "x" * 1000}).encode() + b"\n"

        def body():
            yield (
                f'--{boundary}\r\nContent-Disposition: form-data; name="kind"\r\n\r\nsft\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            for _ in range(4300):
                yield line
            yield f"\r\n--{boundary}--\r\n".encode()

        response = client.post(
            "/api/v1/datasets", content=body(), headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
        )
        assert "content-length" not in response.request.headers
        assert response.request.headers["transfer-encoding"] == "chunked"
        assert response.status_code == 413
        assert response.json() == {"detail": f"request body larger than {self.LIMIT} bytes"}
        assert_nothing_stored(db, datasets_dir)


class TestReadDatasets:
    @pytest.fixture
    def uploaded(self, client, db) -> list[dict]:
        create_project(client, "other")
        return [
            upload(client, "a.jsonl", jsonl(SFT_ROWS)).json(),
            upload(client, "b.jsonl", jsonl(PREFERENCE_ROWS), kind="preference").json(),
            upload(client, "c.jsonl", jsonl(SFT_ROWS), project="other").json(),
        ]

    def test_list_and_filters(self, client, uploaded):
        everything = client.get("/api/v1/datasets").json()
        assert everything["count"] == 3 and [d["id"] for d in everything["data"]] == [d["id"] for d in reversed(uploaded)]
        default = client.get("/api/v1/datasets", params={"project": "default"}).json()
        assert [d["name"] for d in default["data"]] == ["b.jsonl", "a.jsonl"]
        sft = client.get("/api/v1/datasets", params={"kind": "sft"}).json()
        assert sorted(d["name"] for d in sft["data"]) == ["a.jsonl", "c.jsonl"]
        both = client.get("/api/v1/datasets", params={"project": "other", "kind": "preference"}).json()
        assert both == {"data": [], "count": 0}
        page = client.get("/api/v1/datasets", params={"limit": 1, "offset": 1}).json()
        assert page["count"] == 3 and [d["name"] for d in page["data"]] == ["b.jsonl"]

    def test_list_bad_filters(self, client, uploaded):
        assert client.get("/api/v1/datasets", params={"project": "nope"}).status_code == 404
        assert client.get("/api/v1/datasets", params={"kind": "rlhf"}).status_code == 422

    def test_show_is_what_upload_returned(self, client, uploaded):
        for dataset in uploaded:
            assert client.get(f"/api/v1/datasets/{dataset['id']}").json() == dataset

    def test_preview_first_rows(self, client, uploaded):
        preview = client.get(f"/api/v1/datasets/{uploaded[1]['id']}/preview", params={"rows": 2}).json()
        assert preview == {"id": uploaded[1]["id"], "rows": PREFERENCE_ROWS[:2]}
        assert client.get(f"/api/v1/datasets/{uploaded[0]['id']}/preview").json()["rows"] == SFT_ROWS

    def test_preview_parquet(self, client, db):
        content = parquet({"prompt": [f"p{i}" for i in range(30)], "n": list(range(30))})
        dataset = upload(client, "p.parquet", content, kind="prompts").json()
        rows = client.get(f"/api/v1/datasets/{dataset['id']}/preview").json()["rows"]
        assert rows == [{"prompt": f"p{i}", "n": i} for i in range(10)]

    def test_preview_of_non_finite_numbers_is_json(self, client, db):
        dataset = upload(client, "s.jsonl", b'{"text": "a", "score": NaN}\n').json()
        assert client.get(f"/api/v1/datasets/{dataset['id']}/preview").json()["rows"] == [{"text": "a", "score": None}]

    @pytest.mark.parametrize("url", ["/api/v1/datasets/999", "/api/v1/datasets/999/preview"])
    def test_unknown_id_is_404(self, client, uploaded, url):
        response = client.get(url)
        assert response.status_code == 404 and response.json() == {"detail": "dataset 999 not found"}

    @pytest.mark.parametrize("dataset_id", ["0", "x", str(2**31), str(2**63)])
    def test_bad_ids_are_422(self, client, db, dataset_id):
        response = client.get(f"/api/v1/datasets/{dataset_id}")
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["path", "dataset_id"]
