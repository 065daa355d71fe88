"""The logging SDK: any training loop reports to rlplane (docs/sdk.md).

    import rlplane
    run = rlplane.init(project="default", name="my-sft", config={"lr": 3e-5})
    for step in range(steps):
        ...
        run.log({"train/loss": loss.item(), "train/lr": lr}, step=step)
        if run.should_stop():            # a cancel or a hand-back: save, then leave
            break
    run.log_checkpoint("out/ckpt", step=step)
    run.finish()

Inside a run a worker launched (`algorithm: command`), `init` attaches to that run through the environment the
worker sets (RLPLANE_RUN_ID, RLPLANE_RUN_DIR, ...); anywhere else it creates a run with the user's token
(`rlplane login`, or RLPLANE_URL / RLPLANE_TOKEN). Only rank 0 (the RANK variable) reports in a distributed job.
Reporting never blocks the loop: calls append to a buffer that a background thread sends, retrying and spooling to
disk while the API is down; `finish()` (also run at exit) flushes it. Torch-free.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from rlplane import config as saved_config
from rlplane import node_parts
from rlplane.client import Client, ClientError
from rlplane.layout import RESUME_ENV, RUN_DIR_ENV, RUN_ID_ENV, SPEC_ENV, attempt_of_this_process, latest_checkpoint
from rlplane.sdk import console, environment, leftovers, values
from rlplane.sdk.channels import ApiChannel, WorkerChannel
from rlplane.sdk.values import SdkError

__all__ = ["Run", "SdkError", "init"]

logger = logging.getLogger("rlplane.sdk")

Ending = Literal["succeeded", "failed", "cancelled"]
_current: Run | None = None  # the run rlplane.init made last (a second init finishes it)
_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class Run:
    """A run this process reports to. Make one with `rlplane.init()`."""

    def __init__(
        self,
        channel: WorkerChannel | ApiChannel | None,
        *,
        run_id: int | None,
        config: dict[str, Any],
        directory: Path | None = None,
        url: str | None = None,
        resume_from: Path | None = None,
        stop: WorkerChannel | None = None,
    ) -> None:
        self._channel = channel
        self._stop_channel = stop or (channel if isinstance(channel, WorkerChannel) else None)
        self.id = run_id
        self.config = config
        self.dir = directory
        self.url = url
        self.resume_from = resume_from
        self._step: int | None = None
        self._finished = False
        self._lock = threading.Lock()

    @property
    def reporting(self) -> bool:
        """False on ranks other than 0 (their calls are checked, then dropped)."""
        return self._channel is not None

    @property
    def finished(self) -> bool:
        """finish() has run (by the script, at exit, or by a later rlplane.init)."""
        return self._finished

    @property
    def step(self) -> int | None:
        """The newest step logged so far."""
        return self._step

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record metric values at `step` (default: one past the last step logged, 0 at first). Keys are namespaced
        with "/" (train/loss, reward/mean: the dashboard's panels read ours, docs/metrics.md); values are numbers.
        Raises SdkError on a bad key or value, before anything is sent."""
        checked = values.metrics(metrics)
        step = self._next_step(step)
        if self._channel is not None and checked:
            self._channel.reporter.metrics(step, checked)

    def log_samples(self, samples: Sequence[Mapping[str, Any]], step: int | None = None) -> None:
        """Record generated responses at `step` (default: the last step logged): each a mapping with prompt,
        response and optionally reward, kl, advantage, group, scores (named numbers), label, reference. The samples
        of one step that share a prompt are shown as its group."""
        checked = values.samples(samples)
        step = values.check_step(step) if step is not None else (self._step or 0)
        if self._channel is not None and checked:
            self._channel.reporter.samples(step, checked)

    def log_checkpoint(
        self, path: str | os.PathLike[str], step: int | None = None, *, sharded: bool = False, **metadata: Any
    ) -> None:
        """Register a checkpoint the script has saved (a directory or a file) at `step` (default: the last step
        logged): it is stored with the run (inside a worker, in the run's directory and uploaded like ours; elsewhere
        uploaded to the API in the background), listed with its files, and the one a resumed attempt gets as
        `run.resume_from`. The API keeps train.keep_last of them.

        `sharded`: every rank saved its own shards into `path` on its node (FSDP's sharded state, torch.distributed
        checkpoint), and every rank calls this, with the same `step`. On a gang whose nodes do not share the run
        directory (an fsspec artifact root), each node's files then go up from that node and the checkpoint lists
        them all; elsewhere it is rank 0's call that counts, as without `sharded`."""
        if sharded and step is None:
            raise SdkError("log_checkpoint(sharded=True) needs the step, the same on every rank: pass step=")
        step = values.check_step(step) if step is not None else (self._step or 0)
        source = Path(path)
        if not source.exists() and (self._channel is not None or not sharded):  # another node may have saved none
            raise SdkError(f"log_checkpoint: {source} does not exist; save the checkpoint first, then log it")
        json.dumps(metadata)  # metadata travels as JSON: fail here, not in the upload
        if sharded and self.dir is not None and node_parts.per_node():  # a worker's gang with a run directory per node
            elsewhere = node_parts.hand_over_parts(source, step, node_parts.collective_device(), link=True)
            if isinstance(self._channel, WorkerChannel):
                self._channel.checkpoint(source, step, metadata, elsewhere)
        elif self._channel is not None:
            self._channel.checkpoint(source, step, metadata)

    def should_stop(self) -> bool:
        """True once the run is being cancelled or its worker hands it back (a node drains): save a checkpoint and
        return; inside a worker the script then has command.stop_grace_s before it is stopped."""
        channel = self._stop_channel or self._channel
        return channel is not None and channel.should_stop()

    def flush(self, timeout: float | None = 60.0) -> bool:
        """Hand everything logged so far to the channel now (the API, or the worker's files); False after `timeout`."""
        return self._channel is None or self._channel.reporter.flush(timeout)

    def finish(self, status: Ending = "succeeded", reason: str = "") -> None:
        """Flush everything and end the run (outside a worker; inside one, the script's exit code ends it). Called at
        exit if the script does not; a script that raised ends failed with its traceback's last lines."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        console.release()
        if self._channel is not None:
            self._channel.finish(status, reason, self._step)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if error is None:
            self.finish()
        elif isinstance(error, KeyboardInterrupt):
            self.finish("cancelled", "interrupted (Ctrl-C)")
        else:
            self.finish("failed", _tail(kind, error, tb))

    def _next_step(self, step: int | None) -> int:
        step = values.check_step(step) if step is not None else (0 if self._step is None else self._step + 1)
        if self._step is None or step > self._step:
            self._step = step
        return step


def init(
    project: str | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    *,
    description: str = "",
    tags: Sequence[str] = (),
    steps: int | None = None,
    keep_last: int | None = None,
    url: str | None = None,
    token: str | None = None,
    rank: int | None = None,
    capture_output: bool = True,
) -> Run:
    """The run this process reports to: the worker's run when a worker launched the script (the arguments but config
    are then the submitted spec's), else a new run in `project` (default: "default") named `name` (default: the
    script's name). `steps`: how many steps the script will take (the progress shown); `keep_last`: checkpoints kept;
    `capture_output`: what the script prints becomes the run's logs (outside a worker; inside one the worker does it).
    Raises SdkError when the run cannot be created (the message says why: no login, no such project, ...)."""
    global _current
    if _current is not None:  # one run at a time, as a script means it: a second init ends the first
        _current.finish()
    run_config = dict(config or {})
    rank = int(os.environ.get("RANK", "0")) if rank is None else rank
    run_dir = os.environ.get(RUN_DIR_ENV)
    if run_dir:
        _current = _attach(Path(run_dir), run_config, rank)
        return _current
    if rank != 0:
        return Run(None, run_id=None, config=run_config)
    run = _create(project, name, run_config, description, tags, steps, keep_last, url, token)
    if capture_output and run._channel is not None:
        console.capture(run._channel.reporter)
    _current = run
    return run


def _attach(run_dir: Path, run_config: dict[str, Any], rank: int) -> Run:
    run_id = int(os.environ[RUN_ID_ENV])
    attempt = attempt_of_this_process()
    spec_path = os.environ.get(SPEC_ENV)
    spec = json.loads(Path(spec_path).read_text()) if spec_path else {}
    resume = os.environ.get(RESUME_ENV) or None
    resume_from = Path(resume) if resume else latest_checkpoint(run_dir)
    submitted = dict((spec.get("command") or {}).get("config") or {})
    channel = WorkerChannel(run_dir, run_id, attempt, spec)
    if rank != 0:  # another rank: it may ask should_stop(), it reports nothing
        channel.reporter.close()
        return Run(
            None, run_id=run_id, config={**submitted, **run_config}, directory=run_dir, resume_from=resume_from, stop=channel
        )
    channel.environment({**environment.describe(with_git=False), "config": run_config})
    run = Run(channel, run_id=run_id, config={**submitted, **run_config}, directory=run_dir, resume_from=resume_from)
    _finish_at_exit(run)
    return run


def _create(
    project: str | None,
    name: str | None,
    run_config: dict[str, Any],
    description: str,
    tags: Sequence[str],
    steps: int | None,
    keep_last: int | None,
    url: str | None,
    token: str | None,
) -> Run:
    profile = saved_config.resolve(url, token)
    if not profile.token:
        raise SdkError(
            "rlplane.init: no token: run `rlplane login --url URL --token TOKEN`, or set RLPLANE_URL and RLPLANE_TOKEN"
        )
    client = Client(profile.url, profile.token, token_source=profile.token_source)
    train: dict[str, Any] = {"steps": steps or 1}
    if keep_last is not None:
        train["keep_last"] = keep_last
    spec = {
        "name": name or _script_name(),
        "project": project or "default",
        "description": description,
        "tags": list(tags),
        "algorithm": "command",
        "train": train,
        "command": {"argv": list(sys.argv), "config": run_config},
    }
    record = environment.describe(with_git=True)
    try:
        created = client.json("POST", "/runs/external", json={"spec": spec, "environment": record})
    except ClientError as exc:
        client.close()
        raise SdkError(f"rlplane.init: the run was not created: {exc}") from None
    channel = ApiChannel(client, profile.token, created, leftovers.spool_of(int(created["id"])))
    run = Run(channel, run_id=int(created["id"]), config=run_config, url=f"{profile.url}/runs/{created['id']}")
    _finish_at_exit(run)
    return run


def _script_name() -> str:
    stem = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else "script"
    return (_NAME.sub("-", stem).strip("-.") or "script")[:100]


def _tail(kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> str:
    return "".join(traceback.format_exception(kind, error, tb))[-2000:]


def _finish_at_exit(run: Run) -> None:
    """An uncaught exception ends the run failed with its traceback; a normal exit ends it succeeded (outside a
    worker; inside one the exit code says it)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        if not isinstance(error, KeyboardInterrupt):
            run.finish("failed", _tail(kind, error, tb))
        else:
            run.finish("cancelled", "interrupted (Ctrl-C)")
        previous(kind, error, tb)

    sys.excepthook = hook
    atexit.register(run.finish)
