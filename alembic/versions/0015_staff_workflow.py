"""grade_adjustments, regrade_requests and run_comments: staff's point adjustments of a run's
grade, each a row with who, when, the points and why (never overwritten); students' regrade
requests with the staff's decision and reply, at most one open per run; comments on a run by
its student and the staff (grader/course/adjustments.py)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

OPEN = sa.text("state = 'open'")


def upgrade() -> None:
    op.create_table(
        "grade_adjustments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("points", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("by_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["by_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_grade_adjustments_run_id", "grade_adjustments", ["run_id"])
    op.create_table(
        "regrade_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("student_id", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_by_id", sa.Integer(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reply", sa.Text(), nullable=True),
        sa.Column("regrade_run_id", sa.Integer(), nullable=True),
        sa.Column("adjustment_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["student_id"], ["users.id"]),
        sa.ForeignKeyConstraint(["decided_by_id"], ["users.id"]),
        sa.ForeignKeyConstraint(["regrade_run_id"], ["runs.id"]),
        sa.ForeignKeyConstraint(["adjustment_id"], ["grade_adjustments.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_regrade_requests_run_id", "regrade_requests", ["run_id"])
    op.create_index("uq_regrade_requests_open_run", "regrade_requests", ["run_id"], unique=True,
                    postgresql_where=OPEN, sqlite_where=OPEN)
    op.create_table(
        "run_comments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("author_id", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["author_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_run_comments_run_id", "run_comments", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_run_comments_run_id", table_name="run_comments")
    op.drop_table("run_comments")
    op.drop_index("uq_regrade_requests_open_run", table_name="regrade_requests")
    op.drop_index("ix_regrade_requests_run_id", table_name="regrade_requests")
    op.drop_table("regrade_requests")
    op.drop_index("ix_grade_adjustments_run_id", table_name="grade_adjustments")
    op.drop_table("grade_adjustments")
