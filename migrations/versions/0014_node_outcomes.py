"""attempt_nodes.exited_at and stopped_with_attempt: what each node of a gang's attempt did, so that the attempt's
end names the node that failed first (a dead worker found later, a late report of an earlier failure)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28 23:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempt_nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("exited_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("stopped_with_attempt", sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("attempt_nodes", schema=None) as batch_op:
        batch_op.drop_column("stopped_with_attempt")
        batch_op.drop_column("exited_at")
