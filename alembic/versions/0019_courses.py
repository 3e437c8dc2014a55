"""courses: a course holds assignments and one roster and staff list; enrollments are per course,
with the roles instructor, TA and student (grader/course/membership.py, grader/roles.py)

Existing data keeps working: each assignment becomes a course of its own (the same slug and
title), its staff that course's instructors and its students its students, so every grade,
submission, extension and API token stays as it was. A roster import names its course.
Downgrading gives each assignment of a course its course's members again (instructors and
TAs as staff) and forgets roster imports into a course that has no assignment.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def _enrollments(key: str) -> None:
    """The enrollments table keyed by `key` (course_id or assignment_id), with its indexes."""
    table = key.removesuffix("_id") + "s"
    op.create_table(
        "enrollments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(key, sa.Integer(), sa.ForeignKey(f"{table}.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("user_id", key),
    )
    op.create_index("ix_enrollments_user_id", "enrollments", ["user_id"])
    op.create_index(f"ix_enrollments_{key}", "enrollments", [key])


def _replace_enrollments(key: str, copy: str) -> None:
    """Keep the enrollments' rows in a plain table, then make the table again keyed by `key`
    and fill it with `copy`, an INSERT ... SELECT from that table (kept_enrollments)."""
    op.execute("CREATE TABLE kept_enrollments AS SELECT * FROM enrollments")
    op.drop_table("enrollments")
    _enrollments(key)
    op.execute(copy)
    op.drop_table("kept_enrollments")


def upgrade() -> None:
    op.create_table(
        "courses",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("slug", sa.String(length=64), nullable=False, unique=True),
        sa.Column("title", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.execute("INSERT INTO courses (slug, title, created_at) SELECT slug, title, created_at FROM assignments")
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("course_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_assignments_course_id", "courses", ["course_id"], ["id"])
        batch.create_index("ix_assignments_course_id", ["course_id"])
    op.execute("UPDATE assignments SET course_id = (SELECT id FROM courses WHERE courses.slug = assignments.slug)")

    _replace_enrollments("course_id", (
        "INSERT INTO enrollments (course_id, user_id, role, created_at) "
        "SELECT assignments.course_id, kept_enrollments.user_id, "
        "CASE WHEN kept_enrollments.role = 'staff' THEN 'instructor' ELSE 'student' END, kept_enrollments.created_at "
        "FROM kept_enrollments JOIN assignments ON assignments.id = kept_enrollments.assignment_id"))

    with op.batch_alter_table("roster_jobs") as batch:
        batch.add_column(sa.Column("course_id", sa.Integer(), nullable=True))
    op.execute("UPDATE roster_jobs SET course_id = "
               "(SELECT course_id FROM assignments WHERE assignments.id = roster_jobs.assignment_id)")
    with op.batch_alter_table("roster_jobs") as batch:
        batch.alter_column("course_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key("fk_roster_jobs_course_id", "courses", ["course_id"], ["id"])
        batch.drop_column("assignment_id")


def downgrade() -> None:
    with op.batch_alter_table("roster_jobs") as batch:
        batch.add_column(sa.Column("assignment_id", sa.Integer(), nullable=True))
    op.execute("UPDATE roster_jobs SET assignment_id = "
               "(SELECT min(id) FROM assignments WHERE assignments.course_id = roster_jobs.course_id)")
    op.execute("DELETE FROM roster_jobs WHERE assignment_id IS NULL")
    with op.batch_alter_table("roster_jobs") as batch:
        batch.alter_column("assignment_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key("fk_roster_jobs_assignment_id", "assignments", ["assignment_id"], ["id"])
        batch.drop_constraint("fk_roster_jobs_course_id", type_="foreignkey")
        batch.drop_column("course_id")

    _replace_enrollments("assignment_id", (
        "INSERT INTO enrollments (assignment_id, user_id, role, created_at) "
        "SELECT assignments.id, kept_enrollments.user_id, "
        "CASE WHEN kept_enrollments.role = 'student' THEN 'student' ELSE 'staff' END, kept_enrollments.created_at "
        "FROM kept_enrollments JOIN assignments ON assignments.course_id = kept_enrollments.course_id"))

    with op.batch_alter_table("assignments") as batch:
        batch.drop_index("ix_assignments_course_id")
        batch.drop_constraint("fk_assignments_course_id", type_="foreignkey")
        batch.drop_column("course_id")
    op.drop_table("courses")
