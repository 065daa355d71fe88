"""run_attempts.fell_silent: the API failed the attempt because its script said nothing, a guess the script's own
end may still correct (its leftovers sent later by rlplane sync or its next rlplane.init)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 17:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run_attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("fell_silent", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("run_attempts", schema=None) as batch_op:
        batch_op.drop_column("fell_silent")
