"""`rlplane login`, `tokens`, `projects`, `users` and `workers`: who may do what, and on which nodes."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

import typer

from cli import output
from cli.context import JsonFlag, fail, handled, state
from rlplane import config
from rlplane.client import Client


class Role(StrEnum):
    viewer = "viewer"
    member = "member"
    admin = "admin"


tokens_app = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)
projects_app = typer.Typer(help="Projects and their members (roles: viewer, member, admin).", no_args_is_help=True)
users_app = typer.Typer(help="Users (site admins only).", no_args_is_help=True)


@handled
def login(
    ctx: typer.Context,
    url: Annotated[str, typer.Option(help="The rlplane server, e.g. https://rlplane.example.com")],
    token: Annotated[str | None, typer.Option(help="An API token (asked for, hidden, when not given)")] = None,
) -> None:
    """Check a server and token, then save them (mode 0600) for every later command.

    RLPLANE_URL and RLPLANE_TOKEN override the saved login.

    \b
    Example:
      rlplane login --url http://127.0.0.1:8000 --token $(cat ~/.rlplane/admin.token)
    """
    if not re.match(r"^https?://", url):
        raise fail(f"--url must start with http:// or https://, got {url!r}", 2)
    token = token or typer.prompt("token", hide_input=True)
    with Client(url, token, token_source="--token") as client:
        me = client.me()
    path = config.save(url, token)
    output.say(f"logged in to {url.rstrip('/')} as {me['user']['name']} (scopes: {', '.join(me['scopes'])}); saved in {path}")


def logout() -> None:
    """Forget the saved login.

    \b
    Example:
      rlplane logout
    """
    config.config_file().unlink(missing_ok=True)
    output.say("logged out")


@handled
def whoami(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Show the server, user, scopes and project roles the CLI works with.

    \b
    Example:
      rlplane whoami
    """
    client = state(ctx).client()
    me = client.me()
    if as_json:
        return output.print_json({**me, "url": client.url})
    roles = ", ".join(f"{p} ({r})" for p, r in me["roles"].items())
    admin = " (site admin)" if me["user"]["is_site_admin"] else ""
    output.fields(
        [("server", client.url), ("user", me["user"]["name"] + admin), ("scopes", ", ".join(me["scopes"])), ("projects", roles)]
    )


MAX_DAYS = 3650  # the API's limit


def _days(expires: str | None) -> int | None:
    if expires is None or expires.strip().lower() == "never":
        return None
    match = re.fullmatch(r"(\d+)\s*([dwy]?)", expires.strip().lower())
    days = int(match.group(1)) * {"": 1, "d": 1, "w": 7, "y": 365}[match.group(2)] if match else 0
    if not 1 <= days <= MAX_DAYS:
        raise fail(f"--expires must look like 30d, 12w or 1y (at most {MAX_DAYS} days), or never; not {expires!r}", 2)
    return days


@tokens_app.command("create")
@handled
def create_token(
    ctx: typer.Context,
    name: Annotated[str, typer.Option(help="What the token is for, e.g. ci-main")],
    scope: Annotated[list[str], typer.Option(help="read, write, admin (each implies those below) or worker (repeatable)")],
    expires: Annotated[str | None, typer.Option(help="Lifetime: 30d, 12w, 1y or never")] = None,
    user: Annotated[str | None, typer.Option(help="Create it for another user (site admins)")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a token; the secret is printed once, on stdout.

    \b
    Examples:
      rlplane tokens create --name ci --scope write --expires 90d
      rlplane tokens create --name gpu-node-1 --scope worker
    """
    scopes = [s.strip() for value in scope for s in value.split(",") if s.strip()]
    created = state(ctx).client().create_token(name, scopes, _days(expires), user)
    if as_json:
        return output.print_json(created)
    typer.echo(created["token"])
    expiry = f"expires {output.when(created['expires_at'])}" if created["expires_at"] else "never expires"
    output.say(
        f"token {created['id']} ({created['name']}) for {created['user']}, scopes {', '.join(created['scopes'])}, "
        f"{expiry}. It is shown only now: store it."
    )


@tokens_app.command("list")
@handled
def list_tokens(
    ctx: typer.Context,
    all_users: Annotated[bool, typer.Option("--all", help="Every user's tokens (site admins)")] = False,
    as_json: JsonFlag = False,
) -> None:
    """List your tokens (--all: every user's, for site admins). Secrets are never shown again.

    \b
    Example:
      rlplane tokens list --all
    """
    page = state(ctx).client().tokens(all_users=all_users)
    if as_json:
        return output.print_json(page)
    output.table(
        ["ID", "NAME", "USER", "PREFIX", "SCOPES", "CREATED", "EXPIRES", "REVOKED"],
        (
            [
                t["id"],
                t["name"],
                t["user"],
                t["prefix"],
                ",".join(t["scopes"]),
                output.when(t["created_at"]),
                output.when(t["expires_at"]) or "never",
                output.when(t["revoked_at"]),
            ]
            for t in page["data"]
        ),
    )


@tokens_app.command("revoke")
@handled
def revoke_token(ctx: typer.Context, token_id: Annotated[int, typer.Argument(min=1)], as_json: JsonFlag = False) -> None:
    """Revoke a token at once.

    \b
    Example:
      rlplane tokens revoke 7
    """
    token = state(ctx).client().revoke_token(token_id)
    if as_json:
        return output.print_json(token)
    output.say(f"token {token['id']} ({token['name']}) revoked")


@projects_app.command("list")
@handled
def list_projects(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the projects you can see.

    \b
    Example:
      rlplane projects list
    """
    page = state(ctx).client().projects()
    if as_json:
        return output.print_json(page)
    output.table(
        ["ID", "NAME", "YOUR ROLE", "CREATED", "DESCRIPTION"],
        ([p["id"], p["name"], p["role"] or "", output.when(p["created_at"]), p["description"]] for p in page["data"]),
    )


@projects_app.command("show")
@handled
def show_project(ctx: typer.Context, name: str, as_json: JsonFlag = False) -> None:
    """Show a project and its members.

    \b
    Example:
      rlplane projects show nlp
    """
    project = state(ctx).client().project(name)
    if as_json:
        return output.print_json(project)
    _print_project(project)


def _print_project(project: dict) -> None:
    output.fields(
        [
            ("project", project["name"]),
            ("description", project["description"]),
            ("your role", project["role"]),
            ("default priority", project.get("default_priority")),
            ("members may ask up to", project.get("member_max_priority")),
            ("fair share weight", project.get("share")),
        ]
    )
    output.table(["MEMBER", "ROLE"], ([m["user"], m["role"]] for m in project["members"]))
    if project.get("quotas"):
        output.table(
            ["QUEUE", "GPUS (OR SLOTS)", "RUNS"],
            (
                [q["queue"], f"{q['used_gpus']} of {_limit(q['max_gpus'])}", f"{q['used_runs']} of {_limit(q['max_runs'])}"]
                for q in project["quotas"]
            ),
        )


def _limit(value: int | None) -> str:
    return "no limit" if value is None else str(value)


@projects_app.command("scheduling")
@handled
def set_scheduling(
    ctx: typer.Context,
    name: str,
    default_priority: Annotated[
        str | None, typer.Option(help="A run's priority when its spec names none: 0-100, low, normal, high or urgent")
    ] = None,
    member_max_priority: Annotated[
        str | None, typer.Option(help="The highest priority its members may ask for; above it, its admins only")
    ] = None,
    share: Annotated[
        float | None, typer.Option(min=0.001, help="Its weight in fair share between projects' runs of one priority")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Set how a project's runs are prioritised (site admins; docs/scheduling.md); without options, show it.

    \b
    Example:
      rlplane projects scheduling vision --default-priority low --member-max-priority high
    """
    given = {"default_priority": default_priority, "member_max_priority": member_max_priority}
    fields: dict[str, int | str | float] = {
        key: int(value) if value.isdigit() else value for key, value in given.items() if value is not None
    }
    fields |= {"share": share} if share is not None else {}
    client = state(ctx).client()
    project = client.set_scheduling(name, **fields) if fields else client.project(name)
    if as_json:
        return output.print_json(project)
    _print_project(project)


@projects_app.command("create")
@handled
def create_project(
    ctx: typer.Context, name: str, description: Annotated[str, typer.Option()] = "", as_json: JsonFlag = False
) -> None:
    """Create a project; you become its admin.

    \b
    Example:
      rlplane projects create nlp --description "language team"
    """
    project = state(ctx).client().create_project(name, description)
    if as_json:
        return output.print_json(project)
    output.say(f"project {project['name']} created")


@projects_app.command("add-member")
@handled
def add_member(
    ctx: typer.Context,
    project: str,
    user: str,
    role: Annotated[Role, typer.Option(help="viewer (read), member (read and write) or admin (also members)")] = Role.member,
    as_json: JsonFlag = False,
) -> None:
    """Add a user to a project, or change their role.

    \b
    Example:
      rlplane projects add-member nlp alice --role admin
    """
    detail = state(ctx).client().set_member(project, user, role.value)
    if as_json:
        return output.print_json(detail)
    output.say(f"{user} is {role.value} of {project}")


@projects_app.command("remove-member")
@handled
def remove_member(ctx: typer.Context, project: str, user: str) -> None:
    """Remove a user from a project.

    \b
    Example:
      rlplane projects remove-member nlp alice
    """
    state(ctx).client().remove_member(project, user)
    output.say(f"{user} removed from {project}")


@users_app.command("list")
@handled
def list_users(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List users.

    \b
    Example:
      rlplane users list
    """
    page = state(ctx).client().users()
    if as_json:
        return output.print_json(page)
    output.table(
        ["ID", "NAME", "EMAIL", "ADMIN", "DISABLED", "CREATED"],
        (
            [
                u["id"],
                u["name"],
                u["email"] or "",
                "yes" if u["is_site_admin"] else "",
                "yes" if u["disabled"] else "",
                output.when(u["created_at"]),
            ]
            for u in page["data"]
        ),
    )


@users_app.command("create")
@handled
def create_user(
    ctx: typer.Context,
    name: str,
    email: Annotated[str | None, typer.Option()] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Make a site admin")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Create a user (then give them a token: rlplane tokens create --user NAME ...).

    \b
    Example:
      rlplane users create alice --email alice@example.com
    """
    user = state(ctx).client().create_user(name, email, admin)
    if as_json:
        return output.print_json(user)
    output.say(f"user {user['name']} created (id {user['id']})")


@handled
def workers(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List workers, live ones first: queues, GPUs, the run each holds, whether it is stale (silent past the API's
    lost_after_s) and when it was last heard from. Workers silent for a day are dropped (RLPLANE_FORGET_WORKERS_AFTER_S).

    \b
    Example:
      rlplane workers
    """
    page = state(ctx).client().workers()
    if as_json:
        return output.print_json(page)

    def gpus(w: dict) -> str:
        return (
            ", ".join(
                f"{g['name']} {g['memory_total_mb'] // 1024}G"
                + (f" {g['utilization']:.0f}%" if g["utilization"] is not None else "")
                for g in w["gpus"]
            )
            or "-"
        )

    # live workers first; a stale one (silent past the API's lost_after_s) says so: its run is, or will be, lost
    listed = sorted(page["data"], key=lambda w: w["stale"])
    output.table(
        ["NAME", "HOST", "QUEUES", "GPUS", "RUN", "STEP", "STATE", "LAST HEARTBEAT"],
        (
            [
                w["name"],
                w["hostname"],
                ",".join(w["queues"]),
                gpus(w),
                w["current_run_id"] or "",
                "" if w["last_step"] is None else w["last_step"],
                "stale" if w["stale"] else "live",
                output.seconds(w["seconds_since_heartbeat"]) + " ago",
            ]
            for w in listed
        ),
    )


@projects_app.command("quota")
@handled
def set_quota(
    ctx: typer.Context,
    project: str,
    queue: str,
    gpus: Annotated[
        int | None, typer.Option(min=0, help="At most this many GPUs at once (on a CPU queue: worker slots, one per node)")
    ] = None,
    runs: Annotated[int | None, typer.Option(min=0, help="At most this many active runs at once")] = None,
    remove: Annotated[bool, typer.Option("--remove", help="Remove the project's quota on the queue")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Set what a project may hold of a queue at once (site admins; docs/scheduling.md). A run beyond it waits, saying
    so; an option left out has no limit.

    \b
    Example:
      rlplane projects quota vision a100 --gpus 8 --runs 4
    """
    client = state(ctx).client()
    if remove:
        client.remove_quota(project, queue)
        return output.say(f"project {project} has no quota on queue {queue} now")
    detail = client.set_quota(project, queue, max_gpus=gpus, max_runs=runs)
    if as_json:
        return output.print_json(detail)
    _print_project(detail)


@handled
def queues(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Each queue: its live workers, what each project holds of it (beside its quota), and the runs waiting, in the
    order they start, with why each waits (docs/scheduling.md).

    \b
    Example:
      rlplane queues
    """
    page = state(ctx).client().queues()
    if as_json:
        return output.print_json(page)
    for queue in page["data"]:
        output.say(f"queue {queue['name']}: {queue['workers']} workers ({queue['idle']} idle), {queue['gpus']} GPUs")
        output.table(
            ["PROJECT", "HOLDS", "RUNS", "QUOTA"],
            ([h["project"], h["slots"], h["runs"], _quota(h)] for h in queue["holding"]),
        )
        output.table(
            ["WAITING", "PROJECT", "PRIORITY", "WHY"],
            (
                [f"{w['run_id']} {w['name']}" if w["run_id"] else "(not yours)", w["project"], w["priority"], w["reason"]]
                for w in queue["waiting"]
            ),
        )


def _quota(holding: dict) -> str:
    limits = [f"{holding['max_gpus']} slots" if holding["max_gpus"] is not None else ""]
    limits += [f"{holding['max_runs']} runs" if holding["max_runs"] is not None else ""]
    return ", ".join(limit for limit in limits if limit) or "-"
