"""Typed settings for the API process, read from RLPLANE_* environment variables."""

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_home() -> Path:
    return Path.home() / ".rlplane"


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
    max_body_bytes: int = Field(default=16 * 1024 * 1024, description="Largest JSON/YAML request body")
    max_upload_bytes: int = Field(default=2 * 1024**3, description="Largest dataset upload")
    auth_cache_s: float = Field(
        default=2.0, ge=0, description="How long a process reuses a resolved token; other processes see revocations within it"
    )
    sse_poll_s: float = Field(default=0.5, description="How often an SSE stream looks for new rows")
    sse_keepalive_s: float = Field(default=15.0, description="Comment ping interval on idle SSE streams")

    @field_validator("bootstrap_token")
    @classmethod
    def _token_strong_enough(cls, value: str | None) -> str | None:
        if value is not None and len(value) < 24:
            raise ValueError("RLPLANE_BOOTSTRAP_TOKEN must be at least 24 characters; generate one with `openssl rand -hex 24`")
        return value

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'rlplane.db'}"

    @property
    def resolved_artifacts(self) -> str:
        return self.artifacts or str(self.home / "artifacts")
