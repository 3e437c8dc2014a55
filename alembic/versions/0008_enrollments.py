"""enrollments: who is a student or staff of which assignment (grader.course.membership)

Existing data keeps working: every instructor account becomes staff of every existing
assignment, and every student account a student of every existing assignment (until now
roles were service-wide, so that is what each account could do).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "enrollments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("assignment_id", sa.Integer(), sa.ForeignKey("assignments.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("user_id", "assignment_id"),
    )
    op.create_index("ix_enrollments_user_id", "enrollments", ["user_id"])
    op.create_index("ix_enrollments_assignment_id", "enrollments", ["assignment_id"])
    op.execute(
        "INSERT INTO enrollments (user_id, assignment_id, role, created_at) "
        "SELECT users.id, assignments.id, "
        "CASE WHEN users.role = 'instructor' THEN 'staff' ELSE 'student' END, CURRENT_TIMESTAMP "
        "FROM users CROSS JOIN assignments"
    )


def downgrade() -> None:
    op.drop_table("enrollments")
