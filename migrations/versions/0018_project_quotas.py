"""project_quotas: what a project may hold of a queue at once; projects.share: its weight in fair share; runs.slots
and runs.gpus: what a run holds of its queue while active (docs/scheduling.md), recomputed from the stored specs

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 15:10:00
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_quotas",
        sa.Column("project_id", sa.Integer(), sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("queue", sa.String(64), primary_key=True),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("max_runs", sa.Integer(), nullable=True),
    )
    op.add_column("projects", sa.Column("share", sa.Double(), nullable=False, server_default="1"))
    op.add_column("runs", sa.Column("gpus", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("runs", sa.Column("slots", sa.Integer(), nullable=False, server_default="1"))
    # frozen at this revision: a run holds resources.gpus x resources.nodes GPUs, or on CPU one worker slot per node
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("spec", sa.JSON), sa.column("gpus"), sa.column("slots"))
    bind = op.get_bind()
    for run_id, spec in bind.execute(sa.select(runs.c.id, runs.c.spec)).all():
        spec = json.loads(spec) if isinstance(spec, str) else spec or {}
        resources = spec.get("resources") or {}
        gpus, nodes = int(resources.get("gpus") or 0), int(resources.get("nodes") or 1)
        bind.execute(runs.update().where(runs.c.id == run_id).values(gpus=gpus, slots=gpus * nodes if gpus else nodes))


def downgrade() -> None:
    op.drop_column("runs", "slots")
    op.drop_column("runs", "gpus")
    op.drop_column("projects", "share")
    op.drop_table("project_quotas")
