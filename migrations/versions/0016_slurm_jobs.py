"""slurm_jobs: the Slurm jobs of runs on queues bound to a Slurm cluster (api/executors/slurm.py)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29 09:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slurm_jobs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(300), nullable=True),
        sa.Column("node_list", sa.String(2000), nullable=True),
        sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("output", sa.String(1000), nullable=False),
        sa.Column("directory", sa.String(1000), nullable=False),
        sa.Column("token_id", sa.Integer(), sa.ForeignKey("api_tokens.id", ondelete="SET NULL"), nullable=True),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_slurm_jobs_run_id", "slurm_jobs", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_slurm_jobs_run_id", table_name="slurm_jobs")
    op.drop_table("slurm_jobs")
