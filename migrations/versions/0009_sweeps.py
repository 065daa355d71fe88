"""sweeps and sweep_trials: searches over a run spec's fields, each trial a run; a pipeline stage's sweep

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 03:45:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=2000), nullable=False),
        sa.Column("document", JSON, nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], name=op.f("fk_sweeps_project_id_projects"), ondelete="RESTRICT"),
        sa.ForeignKeyConstraint(["created_by"], ["users.id"], name=op.f("fk_sweeps_created_by_users"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
    )
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.create_index("ix_sweeps_project_created", ["project_id", "created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_sweeps_status"), ["status"], unique=False)
    op.create_table(
        "sweep_trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("params", JSON, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(precision=53), nullable=True),
        sa.Column("reason", sa.String(length=2000), nullable=False),
        sa.Column("attrs", JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], name=op.f("fk_sweep_trials_sweep_id_sweeps"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_sweep_trials_run_id_runs"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep_trials")),
        sa.UniqueConstraint("sweep_id", "number", name=op.f("uq_sweep_trials_sweep_id_number")),
    )
    with op.batch_alter_table("sweep_trials", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sweep_trials_sweep_id"), ["sweep_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_sweep_trials_run_id"), ["run_id"], unique=False)
    with op.batch_alter_table("pipeline_stages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_pipeline_stages_sweep_id_sweeps"), "sweeps", ["sweep_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("pipeline_stages", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_pipeline_stages_sweep_id_sweeps"), type_="foreignkey")
        batch_op.drop_column("sweep_id")
    with op.batch_alter_table("sweep_trials", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sweep_trials_run_id"))
        batch_op.drop_index(batch_op.f("ix_sweep_trials_sweep_id"))
    op.drop_table("sweep_trials")
    with op.batch_alter_table("sweeps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sweeps_status"))
        batch_op.drop_index("ix_sweeps_project_created")
    op.drop_table("sweeps")
