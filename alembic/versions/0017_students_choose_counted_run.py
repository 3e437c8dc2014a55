"""assignments.students_choose_counted_run: whether a student may choose which of their own
scored runs counts (a counted_runs row they made themselves), off by default (grader.course.counted_choice)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("students_choose_counted_run", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("students_choose_counted_run")
