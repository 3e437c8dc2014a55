"""assignments: release and due dates, grace, late window, late penalty, score policy;
extensions: extra time per student and assignment (grader.course.deadlines)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("release_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("due_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("grace_s", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("late_window_s", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("late_penalty_per_day", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("score_policy", sa.String(length=16), nullable=False, server_default="latest"))
    op.create_table(
        "extensions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("assignment_id", sa.Integer(), sa.ForeignKey("assignments.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("extra_s", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("assignment_id", "user_id"),
    )


def downgrade() -> None:
    op.drop_table("extensions")
    with op.batch_alter_table("assignments") as batch:
        for column in ("score_policy", "late_penalty_per_day", "late_window_s", "grace_s", "due_at", "release_at"):
            batch.drop_column(column)
