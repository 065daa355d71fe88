"""attempt_nodes: the node slots of a multi-node attempt (a gang); workers.address: where other nodes reach it

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 21:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "attempt_nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=128), nullable=False),
        sa.Column("address", sa.String(length=256), nullable=True),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("joined_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_reason", sa.String(length=2000), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_attempt_nodes_run_id_runs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_attempt_nodes_token_id_api_tokens"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempt_nodes")),
        sa.UniqueConstraint("run_id", "attempt", "node_rank", name=op.f("uq_attempt_nodes_run_id_attempt_node_rank")),
    )
    with op.batch_alter_table("attempt_nodes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_attempt_nodes_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_attempt_nodes_worker"), ["worker"], unique=False)
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("address", sa.String(length=256), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.drop_column("address")
    with op.batch_alter_table("attempt_nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempt_nodes_worker"))
        batch_op.drop_index(batch_op.f("ix_attempt_nodes_run_id"))
    op.drop_table("attempt_nodes")
