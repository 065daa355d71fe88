"""What every client command shares: the resolved server, the `--json` flag, and how failures end.

A failure is one line on stderr and a non-zero exit status, never a traceback (unless --debug):

    0  success                    3  invalid spec (nothing was submitted)
    1  the awaited run failed     4  the request failed: server unreachable, 401/403, 404, 409, ...
    2  the awaited run was cancelled, or a usage error (bad option)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import typer

from rlplane.client import Client, ClientError

EXIT_RUN_FAILED = 1
EXIT_CANCELLED = 2
EXIT_INVALID_SPEC = 3
EXIT_REQUEST_FAILED = 4

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table")]
RunArg = Annotated[int, typer.Argument(help="Run id", min=1, metavar="RUN_ID")]


@dataclass
class State:
    url: str | None = None
    token: str | None = None
    debug: bool = False
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        if self._client is None:
            self._client = Client.from_environment(self.url, self.token)
        return self._client


def state(ctx: typer.Context) -> State:
    root = ctx.find_root()
    if not isinstance(root.obj, State):
        root.obj = State()
    return root.obj


def fail(message: str, code: int = EXIT_REQUEST_FAILED) -> typer.Exit:
    """Print one line for the user; `raise fail(...)` ends the command with `code`."""
    typer.echo(f"rlplane: {message}", err=True)
    return typer.Exit(code)


F = TypeVar("F", bound=Callable[..., Any])


def handled(func: F) -> F:
    """Turn client failures into one line and exit status 4; --debug shows the traceback instead."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ClientError as exc:
            if _debug(kwargs.get("ctx")):
                raise
            raise fail(str(exc)) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _debug(ctx: typer.Context | None) -> bool:
    return ctx is not None and state(ctx).debug
