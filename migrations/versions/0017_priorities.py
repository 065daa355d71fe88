"""priorities: a run's priority and who preempted it, a project's default and member limit (docs/scheduling.md)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29 15:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

NORMAL = "50"  # rlplane.spec's "normal": every run and project before priorities


def upgrade() -> None:
    op.add_column("runs", sa.Column("priority", sa.Integer(), nullable=False, server_default=NORMAL))
    op.add_column("runs", sa.Column("preempted_by", sa.Integer(), nullable=True))
    op.add_column("run_attempts", sa.Column("preempted_by", sa.Integer(), nullable=True))
    op.add_column("projects", sa.Column("default_priority", sa.Integer(), nullable=False, server_default=NORMAL))
    op.add_column("projects", sa.Column("member_max_priority", sa.Integer(), nullable=False, server_default=NORMAL))


def downgrade() -> None:
    op.drop_column("projects", "member_max_priority")
    op.drop_column("projects", "default_priority")
    op.drop_column("run_attempts", "preempted_by")
    op.drop_column("runs", "preempted_by")
    op.drop_column("runs", "priority")
