"""Typed settings of a worker process, read from RLPLANE_* variables (or `rlplane worker` options).

A worker needs the broker, the API's URL and a worker token; never the database.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rlplane.layout import embedded_broker_url


def _default_home() -> Path:
    return Path.home() / ".rlplane"


def _default_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _default_address() -> str:
    """What this host's name resolves to: how the other nodes of a gang usually reach it (override it where not)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLPLANE_", extra="ignore")

    home: Path = Field(default_factory=_default_home, description="State directory for the embedded default")
    broker_url: str | None = Field(default=None, description="Celery broker; default: the SQLite broker in $RLPLANE_HOME")
    api_url: str = Field(default="http://127.0.0.1:8000", description="The API this worker reports to")
    token: str | None = Field(default=None, description="A worker token (scope worker)")
    token_file: Path | None = Field(
        default=None,
        description="A file holding the worker token, read when no token is given (a Slurm job's pilot workers read "
        "theirs from a file only the job's user can read: never argv or the batch script)",
    )
    once: bool = Field(
        default=False, description="Serve one attempt (a run, or a node of a gang), then exit: a Slurm job's pilot worker"
    )
    queues: list[str] = Field(default_factory=lambda: ["cpu"], min_length=1)
    name: str = Field(default_factory=_default_name, description="Unique per worker process")
    advertise_address: str = Field(
        default_factory=_default_address,
        max_length=256,
        description="Where the other nodes of a multi-node run reach this worker's ranks (as node 0, its rendezvous); "
        "default: the address this host's name resolves to",
    )
    artifacts: str | None = Field(
        default=None,
        description="Artifact root shared with the API: a directory (shared file system) or an fsspec URL "
        "(s3://..., trainers then write to $RLPLANE_HOME/scratch and checkpoints are uploaded); "
        "default $RLPLANE_HOME/artifacts",
    )
    input_cache_gb: float | None = Field(
        default=None,
        gt=0,
        description="With an fsspec artifact root: the most, in GB, that the inputs brought down for runs (run:<id> "
        "models, datasets, code snapshots) keep in $RLPLANE_HOME/scratch for later runs; the least recently used go "
        "first, never one a running attempt uses; default: no limit",
    )
    api_wait_s: float = Field(
        default=30.0,
        ge=0,
        description="At start, how long an API that does not answer the token check is retried (it may be starting "
        "beside this worker) before the worker starts anyway and leaves it to the heartbeats",
    )
    heartbeat_s: float = Field(default=3.0, gt=0, description="Heartbeat (and cancel check) interval")
    poll_s: float = Field(
        default=1.0, gt=0, description="How often the trainer's reports are forwarded (one request per interval)"
    )
    hand_back_grace_s: float = Field(
        default=60.0,
        gt=0,
        description="On SIGTERM, how long the trainer gets to checkpoint after its current step and exit before it is "
        "stopped (keep it under the pod's termination grace period, less a checkpoint upload)",
    )
    python: str = Field(default=sys.executable, description="Interpreter that runs `-m trainer_core`")
    fork_trainers: bool = Field(
        default=True,
        description="Fork a CPU run's one trainer process from a process that imported the training stack once "
        "(worker/forks.py), its first step about 3 s sooner than a new interpreter's; false: a new interpreter for each",
    )
    metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="Serve Prometheus metrics (GET /metrics) on this port; default: off"
    )
    log_format: Literal["text", "json"] = Field(default="text", description="text, or json: one JSON object per log line")

    @model_validator(mode="after")
    def _token_from_file(self) -> WorkerSettings:
        if self.token is None and self.token_file is not None:
            try:
                self.token = self.token_file.read_text().strip() or None
            except OSError as exc:
                raise ValueError(f"token_file {self.token_file} cannot be read: {exc.strerror}") from None
        return self

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or embedded_broker_url(self.home)

    @property
    def artifact_root(self) -> str:
        return self.artifacts or str(self.home / "artifacts")
