"""Roster data on the enrollment: what a course's roster says of a member (the name as the roster
gives it, section, the e-mail address the course's notices go to, Canvas's user id, SIS user id
and SIS login id in its own case) is kept on that course's enrollment, so an import in one
course never changes what another shows (grader.course.roster, grader.course.roster_entries);
and the Canvas id of an assignment (assignments.canvas_assignment_id), which titles its column
in the Canvas CSV.

Every gradebook, export and notice stays as it was: each enrollment gets the account's name
and section of today, and each student's enrollment its e-mail address (staff's notices go to
their account's address, as before). users.section goes (a section is only ever a course's); users.full_name
and users.email stay as the person's own display name and address (/forgot mails reset links
there, never to a course's address).

Downgrading puts users.section back from the account's newest enrollment that has one, and
fills an empty users.full_name or users.email the same way; the Canvas and SIS ids are dropped.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

ROSTER_COLUMNS = (("full_name", 256), ("section", 64), ("email", 256), ("canvas_user_id", 32), ("sis_user_id", 256),
                  ("sis_login_id", 256))
CANVAS_INDEX = "uq_enrollments_course_canvas_user"


def _from_newest_enrollment(column: str) -> str:
    """The value of `column` on the user's newest enrollment that has one (SQL, both databases)."""
    return (f"(SELECT e.{column} FROM enrollments e WHERE e.user_id = users.id AND e.{column} IS NOT NULL "
            "ORDER BY e.id DESC LIMIT 1)")


def upgrade() -> None:
    with op.batch_alter_table("enrollments") as batch:
        for name, length in ROSTER_COLUMNS:
            batch.add_column(sa.Column(name, sa.String(length=length), nullable=True))
        batch.create_index(CANVAS_INDEX, ["course_id", "canvas_user_id"], unique=True)
    def copied(name: str) -> str:
        return f"{name} = (SELECT users.{name} FROM users WHERE users.id = enrollments.user_id)"

    op.execute(f"UPDATE enrollments SET {copied('full_name')}, {copied('section')}")
    # A student's roster gave their address; staff have only their own, which the notices fall
    # back to, so a copy would only go stale when they change it
    op.execute(f"UPDATE enrollments SET {copied('email')} WHERE role = 'student'")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("section")
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("canvas_assignment_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("canvas_assignment_id")
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("section", sa.String(length=64), nullable=True))
    op.execute(f"UPDATE users SET section = {_from_newest_enrollment('section')}, "
               f"full_name = COALESCE(full_name, {_from_newest_enrollment('full_name')}), "
               f"email = COALESCE(email, {_from_newest_enrollment('email')})")
    with op.batch_alter_table("enrollments") as batch:
        batch.drop_index(CANVAS_INDEX)
        for name, _ in reversed(ROSTER_COLUMNS):
            batch.drop_column(name)
