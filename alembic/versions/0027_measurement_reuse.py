"""Measurements reused (issue 55): runs.measure_key (worker.measure_key's sha256 of the staged
tree, rubric, engine, toolchain, GPU model and settings a run was measured with; indexed, for
grader.runs.reuse's look-up) and runs.reused_from (the run whose measurements a run took instead
of measuring again). Both empty on every existing run: none is reused, and the first run of each
key after the upgrade measures.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-08
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("measure_key", sa.String(64), nullable=True))
        batch.add_column(sa.Column("reused_from", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_runs_reused_from", "runs", ["reused_from"], ["id"], ondelete="SET NULL")
        batch.create_index("ix_runs_measure_key", ["measure_key"])


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_measure_key")
        batch.drop_constraint("fk_runs_reused_from", type_="foreignkey")
        batch.drop_column("reused_from")
        batch.drop_column("measure_key")
