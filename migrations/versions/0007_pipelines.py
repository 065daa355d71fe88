"""pipelines and pipeline_stages: chains of runs submitted once

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 03:40:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "pipelines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=2000), nullable=False),
        sa.Column("document", JSON, nullable=False),
        sa.Column("created_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_pipelines_project_id_projects"), ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(["created_by"], ["users.id"], name=op.f("fk_pipelines_created_by_users"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pipelines")),
    )
    with op.batch_alter_table("pipelines", schema=None) as batch_op:
        batch_op.create_index("ix_pipelines_project_created", ["project_id", "created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_pipelines_status"), ["status"], unique=False)
    op.create_table(
        "pipeline_stages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pipeline_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("stage", JSON, nullable=False),
        sa.Column("needs", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=2000), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("runs", JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["pipeline_id"], ["pipelines.id"], name=op.f("fk_pipeline_stages_pipeline_id_pipelines"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_pipeline_stages_run_id_runs"), ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pipeline_stages")),
        sa.UniqueConstraint("pipeline_id", "name", name=op.f("uq_pipeline_stages_pipeline_id_name")),
    )
    with op.batch_alter_table("pipeline_stages", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_pipeline_stages_pipeline_id"), ["pipeline_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_pipeline_stages_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("pipeline_stages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pipeline_stages_run_id"))
        batch_op.drop_index(batch_op.f("ix_pipeline_stages_pipeline_id"))
    op.drop_table("pipeline_stages")
    with op.batch_alter_table("pipelines", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_pipelines_status"))
        batch_op.drop_index("ix_pipelines_project_created")
    op.drop_table("pipelines")
