"""metric_rollups: per-block min/max/count/last of each series, so long series downsample fast

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 12:00:00
"""

import sqlalchemy as sa
from alembic import op

from api.metrics.rollups import backfill_sql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_rollups",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("block", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("min", sa.Float(precision=53), nullable=True),
        sa.Column("max", sa.Float(precision=53), nullable=True),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("last_value", sa.Float(precision=53), nullable=False),
        sa.Column("last_is_nan", sa.Boolean(), nullable=False),
        sa.Column("last_time", sa.Float(precision=53), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_metric_rollups_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "key", "width", "block", name=op.f("pk_metric_rollups")),
    )
    for width in (32, 512):  # api.metrics.rollups.WIDTHS when this was written; a change needs a migration
        op.execute(backfill_sql(width))


def downgrade() -> None:
    op.drop_table("metric_rollups")
