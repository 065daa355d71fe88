"""The spec as submitted (comments kept), a few of its fields for run lists (config), why a run failed (config,
diverged, crashed), and samples' labels and reference answers

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 14:00:00
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


JSON_DOC = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _config(spec: dict) -> dict:
    # What api/runs/views.py config_summary keeps (copied: a migration must not change when the app does).
    model, train, backend = (spec.get(name) or {} for name in ("model", "train", "backend"))
    return {
        "model": model.get("path"),
        "lr": train.get("lr"),
        "batch_size": train.get("batch_size"),
        "steps": train.get("steps"),
        "backend": backend.get("kind"),
        "precision": backend.get("precision"),
    }


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("spec_text", sa.Text(), nullable=True))
        batch.add_column(sa.Column("config", JSON_DOC, nullable=True))
        batch.add_column(sa.Column("failure", sa.String(16), nullable=True))
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("spec", JSON_DOC), sa.column("config", JSON_DOC))
    connection = op.get_bind()
    for run_id, spec in connection.execute(sa.select(runs.c.id, runs.c.spec)).all():
        connection.execute(runs.update().where(runs.c.id == run_id).values(config=_config(spec or {})))
    with op.batch_alter_table("run_attempts") as batch:
        batch.add_column(sa.Column("failure", sa.String(16), nullable=True))
    with op.batch_alter_table("samples") as batch:
        batch.add_column(sa.Column("label", sa.String(32), nullable=True))
        batch.add_column(sa.Column("reference", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("samples") as batch:
        batch.drop_column("reference")
        batch.drop_column("label")
    with op.batch_alter_table("run_attempts") as batch:
        batch.drop_column("failure")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("failure")
        batch.drop_column("config")
        batch.drop_column("spec_text")
