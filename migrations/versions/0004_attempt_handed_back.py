"""run_attempts.handed_back: an attempt its worker gave back on shutdown does not use up the retry budget

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 11:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run_attempts") as batch:
        batch.add_column(sa.Column("handed_back", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("run_attempts") as batch:
        batch.drop_column("handed_back")
