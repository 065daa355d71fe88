"""runs.config: the runs table's lr and batch size as the run has them (an eval run trains nothing; a command run's
are its script's own) and how its accuracies were drawn (decoding), recomputed from the stored specs and script
environments

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28 23:55:00
"""

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # runs.config is a cache of the spec (api/runs/views.config_summary): the rule as it was when this revision was
    # written, on the stored JSON, is kept below, so that a later change to the app's (it reads the typed spec now)
    # neither changes nor breaks this revision on specs that older versions stored
    runs = sa.table(
        "runs",
        sa.column("id", sa.Integer),
        sa.column("algorithm", sa.String),
        sa.column("spec", sa.JSON),
        sa.column("environment", sa.JSON),
        sa.column("config", sa.JSON),
    )
    bind = op.get_bind()
    query = sa.select(runs.c.id, runs.c.spec, runs.c.environment)
    for run_id, spec, environment in bind.execute(query).all():
        spec = json.loads(spec) if isinstance(spec, str) else spec or {}
        environment = json.loads(environment) if isinstance(environment, str) else environment or {}
        script = environment.get("config") if isinstance(environment.get("config"), dict) else None
        bind.execute(runs.update().where(runs.c.id == run_id).values(config=_config_summary(spec, script)))


def downgrade() -> None:
    pass  # the summaries stay as recomputed: a cache, right under either schema


# --- frozen at this revision: api/runs/views.py's config_summary and decoding on the stored JSON ---

SCRIPT_KEYS = {
    "model": ("model", "model_name_or_path", "model_path"),
    "lr": ("lr", "learning_rate"),
    "batch_size": ("batch_size", "per_device_train_batch_size", "train_batch_size"),
}


def _decoding(spec: dict[str, Any]) -> str | None:
    """How a run's accuracies were drawn, for labels beside them: `greedy`, or `sampled at T=1` (with `, 8 per
    prompt` past one answer); an eval run's (eval.greedy / eval.samples at eval.gen), an RL run's held-out
    evaluations' (<section>.eval.samples: one is greedy; more are sampled at <section>.gen). None for the others."""
    algorithm = spec.get("algorithm")
    if algorithm == "eval":
        options = spec.get("eval") or {}
        greedy, samples, gen = bool(options.get("greedy")), int(options.get("samples", 1)), options.get("gen") or {}
    elif algorithm in ("grpo", "ppo"):
        section = spec.get(algorithm) or {}
        samples, gen = int((section.get("eval") or {}).get("samples", 1)), section.get("gen") or {}
        greedy = samples == 1
    else:
        return None
    if greedy:
        return "greedy"
    return f"sampled at T={float(gen.get('temperature', 1.0)):g}" + (f", {samples} per prompt" if samples > 1 else "")


def _config_summary(spec: dict[str, Any], script_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec fields a runs table shows beside the metrics, as the run has them: an eval run trains nothing (no lr
    or batch size), and a command run's are its script's own (its command.config, and what rlplane.init recorded:
    `script_config`), else the spec's only where its command line takes them ({train.lr}); null where it has none."""
    model, train, backend = (spec.get(name) or {} for name in ("model", "train", "backend"))
    summary = {
        "model": model.get("path"),
        "lr": train.get("lr"),
        "batch_size": train.get("batch_size"),
        "steps": train.get("steps"),
        "backend": backend.get("kind"),
        "precision": backend.get("precision"),
        "decoding": _decoding(spec),
    }
    if spec.get("algorithm") == "eval":
        return {**summary, "lr": None, "batch_size": None}
    if spec.get("algorithm") != "command":
        return summary
    command = spec.get("command") or {}
    argv = " ".join(str(arg) for arg in command.get("argv") or [])
    given = {**(command.get("config") or {}), **(script_config or {})}
    for field, keys in SCRIPT_KEYS.items():
        own = next((given[key] for key in keys if isinstance(given.get(key), str | int | float)), None)
        # model.path is the user's (lineage); train.lr and batch_size are defaults unless the command line takes them
        taken = field == "model" or f"{{train.{field}}}" in argv
        summary[field] = own if own is not None else summary[field] if taken else None
    # its backend and precision are the script's own business: the spec's defaults say nothing about them
    return {**summary, "backend": None, "precision": None}
