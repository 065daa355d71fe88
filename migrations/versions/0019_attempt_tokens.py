"""run_attempts.tokens: the input tokens an attempt's trainer trained on, as its worker said with its end (usage adds
them up: docs/scheduling.md)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 18:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run_attempts", sa.Column("tokens", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_attempts") as batch_op:
        batch_op.drop_column("tokens")
