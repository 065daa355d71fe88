"""checkpoints.kind: a run's final export is registered beside its training checkpoints

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 08:35:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite changes constraints by copying the table
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="checkpoint"))
        batch.drop_constraint("uq_checkpoints_run_id_step", type_="unique")
        batch.create_unique_constraint("uq_checkpoints_run_id_step_kind", ["run_id", "step", "kind"])


def downgrade() -> None:
    op.execute("DELETE FROM checkpoints WHERE kind <> 'checkpoint'")
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_constraint("uq_checkpoints_run_id_step_kind", type_="unique")
        batch.create_unique_constraint("uq_checkpoints_run_id_step", ["run_id", "step"])
        batch.drop_column("kind")
