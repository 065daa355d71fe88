"""runs.config: the runs table's lr and batch size as the run has them (an eval run trains nothing; a command run's
are its script's own) and how its accuracies were drawn (decoding), recomputed from the stored specs and script
environments

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28 23:55:00
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # runs.config is a cache of the spec (api/runs/views.config_summary), so the current rule recomputes it
    from api.runs.views import config_summary

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
        bind.execute(runs.update().where(runs.c.id == run_id).values(config=config_summary(spec, script)))


def downgrade() -> None:
    pass  # the summaries stay as recomputed: a cache, right under either schema
