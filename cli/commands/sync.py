"""`rlplane sync`: send what scripts on this machine left unsent because the API was down when they ended."""

from __future__ import annotations

import logging

import typer

from cli import output
from cli.context import JsonFlag, fail, handled, state
from rlplane import config
from rlplane.sdk import leftovers


@handled
def sync(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Send the reports, checkpoints and ends of runs that scripts on this machine (rlplane.init outside a worker)
    could not deliver before they exited, the API being unreachable; what is sent is removed from disk.

    The next rlplane.init() on this machine also sends them, in the background. Exit status 4 when something is
    still left (the API is still unreachable, or a spool belongs to another server); a script that still runs sends
    its own.

    \b
    Example:
      rlplane sync
    """
    chosen = state(ctx)
    profile = config.resolve(chosen.url, chosen.token)
    if not profile.token:
        raise fail("no token: run `rlplane login --url URL --token TOKEN`, or set RLPLANE_URL and RLPLANE_TOKEN", 2)
    # the sender's own warnings (a request spooled again, a checkpoint not uploaded yet) say what the summary says
    for name in ("rlplane.reporting", "rlplane.sdk"):
        logging.getLogger(name).setLevel(logging.ERROR)
    results = leftovers.send_all(profile.url, profile.token)
    if as_json:
        output.print_json([vars(r) for r in results])
    elif not results:
        output.say("nothing to send: no script left reports behind")
    for result in results if not as_json else []:
        what = f"run {result.run_id}: "
        if result.skipped:
            output.say(what + f"not sent, {result.skipped}")
        else:
            line = f"{result.requests} request(s) and {result.checkpoints} checkpoint(s) sent"
            output.say(what + line + (f", {result.left} left (the API is unreachable)" if result.left else ""))
    if any(r.left or (r.skipped and not r.running) for r in results):
        raise typer.Exit(4)
