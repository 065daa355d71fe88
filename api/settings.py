"""Typed settings for the API process, read from RLPLANE_* environment variables."""

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from rlplane.allowlist import parse_patterns
from rlplane.layout import embedded_broker_url
from rlplane.limits import MAX_BODY_BYTES


def _default_home() -> Path:
    return Path.home() / ".rlplane"


class SlurmQueue(BaseModel):
    """A queue bound to a Slurm cluster (docs/slurm.md): how its jobs are submitted, and what their workers are told."""

    model_config = ConfigDict(extra="forbid")
    partition: str = Field(min_length=1, description="The partition its jobs run in (sbatch --partition)")
    account: str | None = Field(default=None, description="sbatch --account")
    qos: str | None = Field(default=None, description="sbatch --qos")
    time_limit: str | None = Field(
        default=None, description="sbatch --time, in Slurm's format (e.g. 04:00:00); a job is sent SIGTERM signal_s before"
    )
    signal_s: int = Field(
        default=180,
        ge=0,
        description="How long before the time limit the workers get SIGTERM: they hand the run back "
        "(a checkpoint after the current step) and the next job resumes it; 0: no early signal, the time limit's own "
        "SIGTERM does it, with the cluster's KillWait (30 s by default) to checkpoint before SIGKILL",
    )
    sbatch_lines: list[str] = Field(default_factory=list, description="More #SBATCH lines, e.g. --constraint=a100")
    nice_per_point: int = Field(
        default=100,
        ge=0,
        le=100_000,
        description="A run below normal priority (50) is submitted with sbatch --nice of this much per point below it "
        "(low, 25: --nice=2500), so Slurm starts it after the queue's normal jobs; 0: never. Slurm lets no user raise a "
        "job's priority: for runs above normal, bind another queue to a QoS of the site's (qos) and send them there",
    )
    job_dir: Path = Field(
        description="A directory the API's host and the nodes share: each job's batch script, its worker token (a file "
        "only the job's user can read) and the script's output"
    )
    worker: str = Field(
        default="rlplane", description="How the nodes start rlplane (a path to its command, or e.g. 'python -m cli.main')"
    )
    api_url: str = Field(description="The API as the nodes reach it")
    broker_url: str | None = Field(default=None, description="The broker as the nodes reach it; default: the API's own")
    artifacts: str | None = Field(default=None, description="The artifact root as the nodes reach it; default: the API's own")
    scratch: str = Field(
        default="${TMPDIR:-/tmp}/rlplane-$SLURM_JOB_ID-$SLURM_NODEID",
        description="Each node's worker home (RLPLANE_HOME), a shell word expanded on the node",
    )
    slurm_conf: str | None = Field(default=None, description="SLURM_CONF for sbatch, squeue and scancel on the API's host")
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="More variables for the jobs' workers and trainers (e.g. NCCL_SOCKET_IFNAME); nothing of the API's "
        "own environment reaches a job",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLPLANE_", extra="ignore")

    home: Path = Field(default_factory=_default_home, description="State directory for the embedded default")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default: SQLite at $RLPLANE_HOME/rlplane.db")
    artifacts: str | None = Field(
        default=None, description="Artifact root: a directory or an fsspec URL; default $RLPLANE_HOME/artifacts"
    )
    bootstrap_token: str | None = Field(
        default=None, description="Token for the first admin; generated and written to admin.token when unset"
    )
    signing_key: SecretStr | None = Field(
        default=None,
        description="Key of signed download links (32+ characters), the same on every API replica; default: derived "
        "from RLPLANE_BOOTSTRAP_TOKEN, else $RLPLANE_HOME/signing.key (created once, mode 0600)",
    )
    download_url_ttl_s: int = Field(
        default=300, ge=1, le=86_400, description="How long a signed download link stays valid (checked when the download starts)"
    )
    max_body_bytes: int = Field(default=MAX_BODY_BYTES, description="Largest JSON/YAML request body")
    max_upload_bytes: int = Field(default=2 * 1024**3, description="Largest dataset upload")
    auth_cache_s: float = Field(
        default=2.0, ge=0, description="How long a process reuses a resolved token; other processes see revocations within it"
    )
    sse_poll_s: float = Field(
        default=0.5, description="How often a run's SSE poller, shared by all its streams, looks for new rows"
    )
    alert_s: float = Field(default=10.0, gt=0, description="How often alert rules and the RL detectors look at active runs")
    sse_keepalive_s: float = Field(default=15.0, description="Comment ping interval on idle SSE streams")
    broker_url: str | None = Field(
        default=None, description="Celery broker (redis://...); default: a SQLite broker at $RLPLANE_HOME/broker.db"
    )
    frontend_dir: Path | None = Field(default=None, description="Built dashboard to serve at /; default: frontend/dist")
    dispatch: bool = Field(default=True, description="Send queued runs to the broker and requeue runs whose worker went silent")
    reconcile_s: float = Field(
        default=2.0, gt=0, description="How often queued and silent runs are looked for (a submit is sent at once anyway)"
    )
    redispatch_s: float = Field(default=30.0, gt=0, description="Send a still-queued run again after this long")
    lost_after_s: float = Field(
        default=20.0, gt=0, description="A run whose worker sent no heartbeat for this long is lost (noticed within ~25 s)"
    )
    preempt_after_s: float = Field(
        default=600.0,
        ge=0,
        description="A running run may be preempted for a waiting higher-priority one once its attempt has run this long "
        "(docs/scheduling.md); a run that just started keeps its worker until then",
    )
    preempt_grace_s: float = Field(
        default=120.0,
        gt=0,
        description="How long a preempted run's trainer has to checkpoint after its current step and exit before its "
        "worker stops it (it then resumes from its latest checkpoint)",
    )
    forget_workers_after_s: float = Field(
        default=86_400.0,
        gt=0,
        description="A worker silent for this long is dropped from the workers list (it shows stale before); one that "
        "comes back is listed again with its next heartbeat",
    )
    script_silent_s: float = Field(
        default=300.0,
        gt=0,
        description="A run a script started itself (rlplane.init) that sent nothing, not even its keep-alive (every 10 s), "
        "for this long is failed: its script died without run.finish()",
    )
    max_code_bytes: int = Field(default=100 * 1024**2, gt=0, description="Largest code snapshot (rlplane submit --code)")
    log_format: Literal["text", "json"] = Field(
        default="text", description="text, or json: one JSON object per log line (uvicorn's loggers too), for log collectors"
    )
    # NoDecode: the variable is a comma-separated list (the trainer reads the same one), not JSON.
    reward_entrypoints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Python reward entrypoints runs may use: comma-separated fnmatch patterns such as "
        "my_rewards.*:score (RLPLANE_REWARD_ENTRYPOINTS); empty allows none. Set the same on the workers.",
    )

    slurm_queues: dict[str, SlurmQueue] = Field(
        default_factory=dict,
        description="Queues bound to a Slurm cluster, as JSON: {queue: {partition, job_dir, api_url, ...}} "
        "(RLPLANE_SLURM_QUEUES; docs/slurm.md); a run on such a queue is one Slurm job per attempt",
    )

    @field_validator("reward_entrypoints", mode="before")
    @classmethod
    def _split_patterns(cls, value: object) -> object:
        return parse_patterns(value) if isinstance(value, str) else value

    @field_validator("bootstrap_token")
    @classmethod
    def _token_strong_enough(cls, value: str | None) -> str | None:
        if value is not None and len(value) < 24:
            raise ValueError("RLPLANE_BOOTSTRAP_TOKEN must be at least 24 characters; generate one with `openssl rand -hex 24`")
        return value

    @field_validator("signing_key")
    @classmethod
    def _key_strong_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError("RLPLANE_SIGNING_KEY must be at least 32 characters; generate one with `openssl rand -hex 32`")
        return value

    @field_validator("database_url")
    @classmethod
    def _a_database_url(cls, value: str | None) -> str | None:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        if value is not None:
            try:
                make_url(value)
            except ArgumentError:  # its text is not repeated: it may hold a password
                raise ValueError(
                    "not a database URL; e.g. postgresql+psycopg://rlplane@db:5432/rlplane, or sqlite:////path/rlplane.db"
                ) from None
        return value

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'rlplane.db'}"

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or embedded_broker_url(self.home)

    @property
    def resolved_artifacts(self) -> str:
        return self.artifacts or str(self.home / "artifacts")
