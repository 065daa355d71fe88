"""The `rlplane` client's admin commands (login, whoami, tokens, projects, users, workers, datasets)
run for real against one `rlplane api` process on a fresh Postgres database.

Commands run in-process through typer's CliRunner (stdout and stderr apart); one test runs the CLI
as a subprocess, for the real exit status and what a user sees on the terminal (and --debug).
"""

import json
import os
import shlex
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from cli.main import app
from tests.harness.databases import create_postgres_database, drop_postgres_database
from tests.harness.factories import ADMIN_TOKEN, auth
from tests.harness.servers import api_processes, free_port
from tests.harness.training import SFT_SPEC

pytestmark = pytest.mark.postgres_only

GPU = {"index": 0, "name": "NVIDIA H100", "memory_total_mb": 81920, "memory_used_mb": 1024, "utilization": 40.0}


@dataclass
class Server:
    url: str

    def api(self, method: str, path: str, token: str = ADMIN_TOKEN, **kwargs) -> httpx.Response:
        return httpx.request(method, self.url + "/api/v1" + path, headers=auth(token), timeout=30, **kwargs)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    database_url = create_postgres_database()
    try:
        with api_processes(tmp_path_factory.mktemp("api-home"), database_url, ADMIN_TOKEN) as (api,):
            yield Server(api.url)
    finally:
        drop_postgres_database(database_url)


@pytest.fixture
def env(server, tmp_path) -> dict[str, str | None]:
    """The CLI's environment: this server and the admin token, an empty config dir and RLPLANE_HOME."""
    return {
        "RLPLANE_URL": server.url,
        "RLPLANE_TOKEN": ADMIN_TOKEN,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "RLPLANE_HOME": str(tmp_path / "home"),  # holds no admin.token
        "COLUMNS": "200",
    }


def rlplane(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def ok(env: dict[str, str | None], *args: str) -> Result:
    result = rlplane(env, *args)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


def failed(result: Result, code: int, *needles: str) -> str:
    """The one-line error of a failed command, checked for its exit status and the words it must name."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    message = result.stderr.strip()
    assert message.startswith("rlplane: ") and "\n" not in message, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def shell(env: dict[str, str | None], *args: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, env=full, cwd=root, timeout=60
    )


def token_row(env: dict[str, str | None], name: str) -> dict:
    rows = [t for t in json.loads(ok(env, "tokens", "list", "--json").stdout)["data"] if t["name"] == name]
    assert len(rows) == 1, rows
    return rows[0]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


SFT_ROWS = [{"prompt": f"What is {i}+{i}?", "completion": f" {2 * i}"} for i in range(3)]


# --- login, logout, whoami ---------------------------------------------------------------------


def test_login_saves_a_private_config_that_later_commands_use(server, env):
    no_env = {**env, "RLPLANE_URL": None, "RLPLANE_TOKEN": None}
    result = ok(no_env, "login", "--url", server.url + "/", "--token", ADMIN_TOKEN)
    assert result.stdout == "" and "logged in to " + server.url in result.stderr and "as admin" in result.stderr

    path = Path(env["XDG_CONFIG_HOME"]) / "rlplane" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"url": server.url, "token": ADMIN_TOKEN}

    me = json.loads(ok(no_env, "whoami", "--json").stdout)
    assert me["url"] == server.url and me["user"]["name"] == "admin" and me["user"]["is_site_admin"]
    assert "admin" in me["scopes"] and me["roles"]["default"] == "admin"
    table = ok(no_env, "whoami").stdout
    assert server.url in table and "admin (site admin)" in table and "default (admin)" in table

    # RLPLANE_TOKEN overrides the saved login, and the 401 says where the refused token came from
    bad = rlplane({**no_env, "RLPLANE_TOKEN": "rlp_not-a-real-token"}, "whoami")
    failed(bad, 4, "401", "RLPLANE_TOKEN")

    ok(no_env, "logout")
    assert not path.exists()
    failed(rlplane({**no_env, "RLPLANE_URL": server.url}, "whoami"), 4, "401", "no token", "rlplane login")
    assert ok(no_env, "logout").exit_code == 0  # logging out twice is fine


def test_a_revoked_saved_login_is_named_in_the_401(server, env):
    created = server.api("POST", "/tokens", json={"name": "laptop", "scopes": ["read"]}).json()
    no_env = {**env, "RLPLANE_URL": None, "RLPLANE_TOKEN": None}
    ok(no_env, "login", "--url", server.url, "--token", created["token"])
    assert json.loads(ok(no_env, "whoami", "--json").stdout)["scopes"] == ["read"]
    assert server.api("DELETE", f"/tokens/{created['id']}").status_code == 200
    failed(rlplane(no_env, "whoami"), 4, "401", "saved login", "config.json")


def test_login_with_a_refused_token_saves_nothing(server, env):
    failed(rlplane(env, "login", "--url", server.url, "--token", "rlp_wrong-token-0000000000"), 4, "401", "--token")
    assert not (Path(env["XDG_CONFIG_HOME"]) / "rlplane").exists()


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://example.com"])
def test_login_url_must_be_http(env, url):
    failed(rlplane(env, "login", "--url", url, "--token", ADMIN_TOKEN), 2, "--url", "http")
    assert not (Path(env["XDG_CONFIG_HOME"]) / "rlplane").exists()


def test_errors_are_one_line_without_traceback_unless_debug(server, env):
    plain = shell({**env, "RLPLANE_TOKEN": "rlp_bad-token-0000000000"}, "whoami")
    assert plain.returncode == 4 and plain.stdout == ""
    assert plain.stderr.startswith("rlplane: 401") and plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr

    debug = shell({**env, "RLPLANE_TOKEN": "rlp_bad-token-0000000000"}, "--debug", "whoami")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "ApiError" in debug.stderr

    # no server there at all: one line that says how to point the CLI at one (POST: not retried)
    nowhere = f"http://127.0.0.1:{free_port()}"
    down = shell({**env, "RLPLANE_URL": nowhere}, "tokens", "create", "--name", "x", "--scope", "read")
    assert down.returncode == 4 and "Traceback" not in down.stderr and down.stderr.count("\n") == 1
    assert down.stderr.startswith("rlplane: cannot reach the rlplane server at " + nowhere) and "--url" in down.stderr


def test_global_url_and_token_options_win_over_the_environment(server, env):
    elsewhere = {**env, "RLPLANE_URL": f"http://127.0.0.1:{free_port()}", "RLPLANE_TOKEN": "rlp_bad-token-0000000000"}
    me = json.loads(ok(elsewhere, "--url", server.url, "--token", ADMIN_TOKEN, "whoami", "--json").stdout)
    assert me["user"]["name"] == "admin" and me["url"] == server.url
    failed(rlplane(env, "--token", "rlp_bad-token-0000000000", "whoami"), 4, "401", "--token")


# --- tokens ------------------------------------------------------------------------------------


def test_token_create_prints_only_the_secret_which_works_until_revoked(server, env):
    result = ok(env, "tokens", "create", "--name", "ci-main", "--scope", "write", "--expires", "30d")
    secret = result.stdout.strip()
    assert result.stdout == secret + "\n" and secret.startswith("rlp_") and " " not in secret
    assert "ci-main" in result.stderr and "expires" in result.stderr and "shown only now" in result.stderr

    me = server.api("GET", "/me", token=secret)
    assert me.status_code == 200 and me.json()["user"]["name"] == "admin" and me.json()["scopes"] == ["write"]

    listed = ok(env, "tokens", "list", "--json").stdout
    assert secret not in listed
    row = token_row(env, "ci-main")
    assert row["scopes"] == ["write"] and row["revoked_at"] is None and row["prefix"] == secret[:10]
    expires = datetime.fromisoformat(row["expires_at"]).replace(tzinfo=UTC)
    assert timedelta(days=29) < expires - datetime.now(UTC) <= timedelta(days=30, minutes=1)
    table = ok(env, "tokens", "list").stdout
    assert "ci-main" in table and secret[:10] in table and secret not in table

    revoked = ok(env, "tokens", "revoke", str(row["id"]))
    assert f"token {row['id']} (ci-main) revoked" in revoked.stderr
    assert server.api("GET", "/me", token=secret).status_code == 401
    assert token_row(env, "ci-main")["revoked_at"] is not None
    failed(rlplane(env, "tokens", "revoke", "999999"), 4, "404")


@pytest.mark.parametrize(("expires", "days"), [("2w", 14), ("1y", 365), ("7", 7), ("30D", 30), ("never", None)])
def test_token_lifetimes(env, expires, days):
    name = f"life-{expires}"
    created = json.loads(ok(env, "tokens", "create", "--name", name, "--scope", "read", "--expires", expires, "--json").stdout)
    assert created["name"] == name and created["token"].startswith("rlp_")
    if days is None:
        assert created["expires_at"] is None
    else:
        left = datetime.fromisoformat(created["expires_at"]).replace(tzinfo=UTC) - datetime.now(UTC)
        assert timedelta(days=days - 1) < left <= timedelta(days=days, minutes=1)


@pytest.mark.parametrize("expires", ["0d", "soon", "-3d", "30m", "11y"])
def test_bad_expires_is_a_usage_error_and_creates_nothing(server, env, expires):
    failed(rlplane(env, "tokens", "create", "--name", "bad-expiry", "--scope", "read", "--expires", expires), 2, "--expires")
    assert all(t["name"] != "bad-expiry" for t in server.api("GET", "/tokens").json()["data"])


def test_scopes_split_on_commas_and_worker_stands_alone(server, env):
    created = json.loads(ok(env, "tokens", "create", "--name", "rw", "--scope", "read,write", "--json").stdout)
    assert created["scopes"] == ["read", "write"] and created["expires_at"] is None
    mixed = rlplane(env, "tokens", "create", "--name", "mixed", "--scope", "worker", "--scope", "read")
    failed(mixed, 4, "422", "worker scope stands alone")
    assert all(t["name"] != "mixed" for t in server.api("GET", "/tokens").json()["data"])
    failed(rlplane(env, "tokens", "create", "--name", "x", "--scope", "root"), 4, "422", "scopes")


# --- users and projects ------------------------------------------------------------------------


def test_users_create_and_list(server, env):
    made = ok(env, "users", "create", "carol", "--email", "carol@example.com", "--admin")
    assert "user carol created" in made.stderr
    users = {u["name"]: u for u in server.api("GET", "/users").json()["data"]}
    assert users["carol"]["is_site_admin"] and users["carol"]["email"] == "carol@example.com"
    ok(env, "users", "create", "dave")

    listed = {u["name"]: u for u in json.loads(ok(env, "users", "list", "--json").stdout)["data"]}
    assert listed["carol"]["is_site_admin"] and not listed["dave"]["is_site_admin"] and "admin" in listed
    table = ok(env, "users", "list").stdout.splitlines()
    assert any("carol" in line and "carol@example.com" in line and "yes" in line for line in table)
    failed(rlplane(env, "users", "create", "carol"), 4, "409", "already exists")
    failed(rlplane(env, "users", "create", "bad name!"), 4, "422", "name")

    # a user who is not a site admin is refused, in one line
    secret = server.api("POST", "/tokens", json={"name": "dave-cli", "scopes": ["read"], "user": "dave"}).json()["token"]
    failed(rlplane({**env, "RLPLANE_TOKEN": secret}, "users", "list"), 4, "403")


def test_projects_create_members_show_list(server, env):
    made = ok(env, "projects", "create", "vision", "--description", "image team")
    assert "project vision created" in made.stderr
    project = server.api("GET", "/projects/vision").json()
    assert project["description"] == "image team" and project["members"] == [{"user": "admin", "role": "admin"}]
    failed(rlplane(env, "projects", "create", "vision"), 4, "409", "already exists")

    ok(env, "users", "create", "erin")
    added = ok(env, "projects", "add-member", "vision", "erin", "--role", "viewer")
    assert "erin is viewer of vision" in added.stderr
    members = {m["user"]: m["role"] for m in server.api("GET", "/projects/vision").json()["members"]}
    assert members == {"admin": "admin", "erin": "viewer"}
    ok(env, "projects", "add-member", "vision", "erin")  # default role: member
    shown = json.loads(ok(env, "projects", "show", "vision", "--json").stdout)
    assert {m["user"]: m["role"] for m in shown["members"]} == {"admin": "admin", "erin": "member"}
    table = ok(env, "projects", "show", "vision").stdout
    assert "image team" in table and any("erin" in line and "member" in line for line in table.splitlines())

    listed = {p["name"]: p for p in json.loads(ok(env, "projects", "list", "--json").stdout)["data"]}
    assert listed["vision"]["role"] == "admin" and "default" in listed
    assert any("vision" in line and "image team" in line for line in ok(env, "projects", "list").stdout.splitlines())

    removed = ok(env, "projects", "remove-member", "vision", "erin")
    assert "erin removed from vision" in removed.stderr
    assert [m["user"] for m in server.api("GET", "/projects/vision").json()["members"]] == ["admin"]
    failed(rlplane(env, "projects", "remove-member", "vision", "erin"), 4, "404")
    failed(rlplane(env, "projects", "show", "no-such-project"), 4, "404")
    failed(rlplane(env, "projects", "add-member", "vision", "nobody-here"), 4, "404")

    # priorities (docs/scheduling.md): the documented example, then a name the API does not know
    example = next(
        line.strip() for line in ok(env, "projects", "scheduling", "--help").stdout.splitlines() if "rlplane projects" in line
    )
    set_ = json.loads(ok(env, *shlex.split(example)[1:], "--share", "2", "--json").stdout)
    assert (set_["default_priority"], set_["member_max_priority"], set_["share"]) == (25, 75, 2)
    shown = ok(env, "projects", "scheduling", "vision").stdout.splitlines()
    assert any("default priority" in line and "25" in line for line in shown)
    failed(rlplane(env, "projects", "scheduling", "vision", "--default-priority", "vip"), 4, "422", "default_priority")

    # quotas and the queue view (docs/scheduling.md)
    usage = ok(env, "projects", "quota", "--help").stdout.splitlines()
    example = next(line.strip() for line in usage if "rlplane projects" in line)
    shown = ok(env, *shlex.split(example)[1:]).stdout
    assert any("a100" in line and "0 of 8" in line and "0 of 4" in line for line in shown.splitlines()), shown
    assert server.api("GET", "/projects/vision").json()["quotas"][0]["max_gpus"] == 8
    run = {**SFT_SPEC, "name": "waits-for-a100", "project": "vision", "resources": {"queue": "a100", "priority": "low"}}
    assert server.api("POST", "/runs", json=run).status_code == 201
    [a100] = [q for q in json.loads(ok(env, "queues", "--json").stdout)["data"] if q["name"] == "a100"]
    assert a100["workers"] == 0 and [(w["name"], w["priority"]) for w in a100["waiting"]] == [("waits-for-a100", 25)]
    listed = ok(env, "queues")
    assert "queue a100: 0 workers (0 idle), 0 GPUs" in listed.stderr, listed.stderr
    assert any("waits-for-a100" in line and "no live worker serves queue a100" in line for line in listed.stdout.splitlines())
    example = next(line.strip() for line in ok(env, "usage", "--help").stdout.splitlines() if "rlplane usage" in line)
    assert "usage from" in ok(env, *shlex.split(example)[1:]).stderr
    report = json.loads(ok(env, "usage", "--by", "queue", "--interval", "day", "--json").stdout)
    assert report["by"] == "queue" and report["interval"] == "day" and report["data"] == []  # nothing has run
    assert ok(env, "usage", "--csv").stdout == "project,start,gpu_seconds,cpu_slot_seconds,tokens,attempts,runs\n"
    failed(rlplane(env, "usage", "--since", "yesterday"), 4, "422", "since")
    assert "removed" not in ok(env, "projects", "quota", "vision", "a100", "--remove").stdout
    assert server.api("GET", "/projects/vision").json()["quotas"] == []
    failed(rlplane(env, "projects", "quota", "vision", "a100", "--remove"), 4, "404")


def test_the_documented_add_member_example_works(server, env):
    """The example in `projects add-member --help` runs as shown, and a role the server does not have
    is refused before any request."""
    ok(env, "projects", "create", "nlp")
    ok(env, "users", "create", "alice")
    example = next(
        line.strip() for line in ok(env, "projects", "add-member", "--help").stdout.splitlines() if "rlplane projects" in line
    )
    result = rlplane(env, *shlex.split(example)[1:])
    assert result.exit_code == 0, f"the documented example `{example}` fails: {result.stderr.strip()}"
    assert rlplane(env, "projects", "add-member", "nlp", "alice", "--role", "owner").exit_code == 2


def test_names_with_brackets_are_printed_as_given(server, env, tmp_path):
    """Names are user data, not rich markup: a "[/]" in a token or dataset name is printed as given
    (rich would raise MarkupError, after the token was created and its secret printed)."""
    result = ok(env, "tokens", "create", "--name", "ci [/] nightly", "--scope", "read")
    assert result.stdout.startswith("rlp_") and "(ci [/] nightly)" in result.stderr
    assert "ci [/] nightly" in ok(env, "tokens", "list").stdout
    data = _jsonl(tmp_path / "b.jsonl", SFT_ROWS)
    source = ok(env, "datasets", "upload", str(data), "--kind", "sft", "--name", "[bold]raw[/]").stdout.strip()
    assert "[bold]raw[/]" in ok(env, "datasets", "show", source.removeprefix("dataset:")).stdout
    assert "[bold]raw[/]" in ok(env, "datasets", "list").stdout


def test_a_site_admin_lists_every_users_tokens(server, env):
    """`tokens list --all` shows a site admin the token they just made for another user (to revoke
    it later); without --all the list holds only their own."""
    ok(env, "users", "create", "ci-bot")
    made = ok(env, "tokens", "create", "--name", "ci-bot-token", "--scope", "read", "--user", "ci-bot", "--json")
    created = json.loads(made.stdout)
    listed = {t["id"]: t for t in json.loads(ok(env, "tokens", "list", "--all", "--json").stdout)["data"]}
    assert created["id"] in listed and listed[created["id"]]["user"] == "ci-bot"
    own = json.loads(ok(env, "tokens", "list", "--json").stdout)["data"]
    assert created["id"] not in [t["id"] for t in own] and {t["user"] for t in own} == {"admin"}


# --- workers -----------------------------------------------------------------------------------


def test_workers_empty_then_after_a_heartbeat(server, env):
    assert json.loads(ok(env, "workers", "--json").stdout) == {"data": [], "count": 0}
    empty = ok(env, "workers").stdout
    assert "NAME" in empty and "LAST HEARTBEAT" in empty and len(empty.strip().splitlines()) == 1

    ok(env, "users", "create", "node-bot")
    created = ok(env, "tokens", "create", "--name", "gpu-node-1", "--scope", "worker", "--user", "node-bot")
    secret = created.stdout.strip()
    assert "for node-bot" in created.stderr and "never expires" in created.stderr
    beat = {"name": "gpu-node-1", "hostname": "gpu-01", "queues": ["gpu", "gpu-80g"], "capacity": 2, "gpus": [GPU]}
    assert server.api("POST", "/workers/heartbeat", token=secret, json=beat).status_code == 200

    page = json.loads(ok(env, "workers", "--json").stdout)
    assert page["count"] == 1
    worker = page["data"][0]
    assert worker["name"] == "gpu-node-1" and worker["hostname"] == "gpu-01" and worker["capacity"] == 2
    assert worker["queues"] == ["gpu", "gpu-80g"] and worker["gpus"] == [GPU] and worker["current_run_id"] is None
    rows = ok(env, "workers").stdout.splitlines()
    assert len(rows) == 2 and "gpu-node-1" in rows[1] and "gpu-01" in rows[1] and "gpu,gpu-80g" in rows[1]
    assert "NVIDIA H100 80G 40%" in rows[1] and rows[1].rstrip().endswith("ago") and " live " in rows[1]

    # the worker token is for heartbeats and leases, not for people's commands
    failed(rlplane({**env, "RLPLANE_TOKEN": secret}, "projects", "list"), 4, "403")


# --- datasets ----------------------------------------------------------------------------------


def test_dataset_upload_list_show(server, env, tmp_path):
    data = _jsonl(tmp_path / "arith.jsonl", SFT_ROWS)
    result = ok(env, "datasets", "upload", str(data), "--kind", "sft", "--name", "arith")
    source = result.stdout.strip()
    assert result.stdout == source + "\n" and source.startswith("dataset:")
    dataset_id = int(source.removeprefix("dataset:"))
    assert f"dataset {dataset_id} (arith): 3 rows" in result.stderr

    stored = server.api("GET", f"/datasets/{dataset_id}").json()
    assert stored["rows"] == 3 and stored["columns"] == ["prompt", "completion"] and stored["project"] == "default"
    assert stored["kind"] == "sft" and stored["size"] == data.stat().st_size and stored["name"] == "arith"

    listed = {d["id"]: d for d in json.loads(ok(env, "datasets", "list", "--json").stdout)["data"]}
    assert listed[dataset_id]["rows"] == 3 and listed[dataset_id]["source"] == source
    assert json.loads(ok(env, "datasets", "list", "--project", "default", "--json").stdout)["count"] >= 1
    assert any(source in line and "arith" in line for line in ok(env, "datasets", "list").stdout.splitlines())

    shown = json.loads(ok(env, "datasets", "show", str(dataset_id), "--json").stdout)
    assert shown["columns"] == ["prompt", "completion"] and shown["rows"] == 3
    assert shown["preview"] == SFT_ROWS
    table = ok(env, "datasets", "show", str(dataset_id)).stdout
    assert "prompt, completion" in table and "PROMPT" in table and "What is 2+2?" in table
    failed(rlplane(env, "datasets", "show", "999999"), 4, "404")


def test_invalid_dataset_is_refused_and_nothing_is_stored(server, env, tmp_path):
    before = server.api("GET", "/datasets").json()["count"]
    data = _jsonl(tmp_path / "broken.jsonl", [SFT_ROWS[0], {"prompt": "no answer here"}])
    message = failed(rlplane(env, "datasets", "upload", str(data), "--kind", "sft"), 4, "422", "row 2", "completion")
    assert "missing" in message or "must" in message
    prefs = _jsonl(tmp_path / "prefs.jsonl", SFT_ROWS)  # sft rows are not preference rows
    failed(rlplane(env, "datasets", "upload", str(prefs), "--kind", "preference"), 4, "422", "chosen")
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    failed(rlplane(env, "datasets", "upload", str(text), "--kind", "sft"), 4, "422", ".jsonl")
    failed(rlplane(env, "datasets", "upload", str(data), "--kind", "sft", "--project", "nowhere"), 4, "404")
    assert server.api("GET", "/datasets").json()["count"] == before


def test_dataset_upload_usage_errors(env, tmp_path):
    failed(rlplane(env, "datasets", "upload", str(tmp_path / "missing.jsonl"), "--kind", "sft"), 2, "no such file")
    data = _jsonl(tmp_path / "ok.jsonl", SFT_ROWS)
    bad_kind = rlplane(env, "datasets", "upload", str(data), "--kind", "chat")
    assert bad_kind.exit_code == 2 and "--kind" in bad_kind.stderr


# --- help --------------------------------------------------------------------------------------

COMMANDS = [
    ["login"],
    ["logout"],
    ["whoami"],
    ["tokens", "create"],
    ["tokens", "list"],
    ["tokens", "revoke"],
    ["projects", "list"],
    ["projects", "show"],
    ["projects", "create"],
    ["projects", "add-member"],
    ["projects", "remove-member"],
    ["users", "list"],
    ["users", "create"],
    ["workers"],
    ["datasets", "upload"],
    ["datasets", "list"],
    ["datasets", "show"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example(command, tmp_path):
    result = CliRunner().invoke(app, [*command, "--help"], env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert result.exit_code == 0 and "Usage" in result.stdout and "Example" in result.stdout
    assert "rlplane " + " ".join(command) in result.stdout  # the example runs this very command
