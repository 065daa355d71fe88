"""runs.scripted: a run its own script started (rlplane.init), read without loading the spec (run lists defer it)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28 23:00:00
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("scripted", sa.Boolean(), server_default=sa.false(), nullable=False))
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("spec", sa.JSON), sa.column("scripted", sa.Boolean))
    bind = op.get_bind()
    # Only command runs can be scripted; the spec is read in Python so one migration serves JSONB and SQLite's JSON.
    rows = bind.execute(sa.select(runs.c.id, runs.c.spec).where(sa.text("algorithm = 'command'"))).all()
    for run_id, spec in rows:
        spec = json.loads(spec) if isinstance(spec, str) else spec
        if ((spec or {}).get("command") or {}).get("external"):
            bind.execute(runs.update().where(runs.c.id == run_id).values(scripted=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("scripted")
