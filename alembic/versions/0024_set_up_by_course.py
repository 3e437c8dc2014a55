"""A course's set-up of an account nobody has used yet (grader/auth/set_up.py): the course whose
staff gave the account its first password (users.password_set_up_by_course_id) and its e-mail
address (users.email_set_up_by_course_id), and the course whose instructor issued a first-login
link (password_resets.set_up_by_course_id). What a course set up opens the account only while no
other course holds it.

For the accounts nobody has used yet (first_login_at NULL), the upgrade fills them in from what
the database still says:
- the first password: the course of the roster import (roster_jobs, its result's `created`
  logins) that made the account, when an instructor who was no site administrator asked for it
  and no `password_changed` row shows the operator setting another since. An account the
  operator's `grader roster import` made, or whose login was renamed since, is left NULL: its
  import is not recorded, or not under that login;
- the e-mail: that import's course when no `email_changed` row follows (the address came from
  the file); when the newest `email_changed` row was an instructor's (an actor, not the account,
  who is no site administrator), the account's first course by id (an instructor sets up only an
  account in courses they instruct); NULL when it was the operator's or a site administrator's;
- an unused, unexpired link that an instructor (no site administrator) issued: the account's
  first course by id.
An account in several courses is so tied to one of them, which makes what a course set up of it
refused: as the service does from now on, a site administrator gives its first login.

Downgrading drops the three columns.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""
from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_utc = sa.DateTime(timezone=True)
# (table, column, its foreign key's name)
_COLUMNS = (("users", "password_set_up_by_course_id", "fk_users_password_set_up_by_course"),
            ("users", "email_set_up_by_course_id", "fk_users_email_set_up_by_course"),
            ("password_resets", "set_up_by_course_id", "fk_password_resets_set_up_by_course"))

users = sa.table("users", sa.column("id", sa.Integer()), sa.column("username", sa.String()),
                 sa.column("email", sa.String()), sa.column("site_admin", sa.Boolean()),
                 sa.column("first_login_at", _utc), sa.column("password_set_up_by_course_id", sa.Integer()),
                 sa.column("email_set_up_by_course_id", sa.Integer()))
resets = sa.table("password_resets", sa.column("id", sa.Integer()), sa.column("user_id", sa.Integer()),
                  sa.column("issued_by_id", sa.Integer()), sa.column("expires_at", _utc),
                  sa.column("used_at", _utc), sa.column("set_up_by_course_id", sa.Integer()))
jobs = sa.table("roster_jobs", sa.column("id", sa.Integer()), sa.column("course_id", sa.Integer()),
                sa.column("requested_by", sa.Integer()), sa.column("result", sa.JSON()))
audit = sa.table("audit_events", sa.column("id", sa.Integer()), sa.column("event", sa.String()),
                 sa.column("user_id", sa.Integer()), sa.column("actor_id", sa.Integer()))
enrollments = sa.table("enrollments", sa.column("user_id", sa.Integer()), sa.column("course_id", sa.Integer()))


def _made_by_roster(bind: sa.Connection, unused: dict[str, int], admins: set[int]) -> dict[int, int]:
    """user id -> the course of the roster import that made the account (`unused`: login -> id),
    the first such job that an instructor, no site administrator, asked for."""
    made: dict[int, int] = {}
    for course_id, result in bind.execute(sa.select(jobs.c.course_id, jobs.c.result).where(
            jobs.c.requested_by.not_in(list(admins) or [0])).order_by(jobs.c.id)):
        for login in (result or {}).get("created", []):
            if login in unused:
                made.setdefault(unused[login], course_id)
    return made


def _newest_actor(bind: sa.Connection, event: str) -> dict[int, int | None]:
    """user id -> the actor of the newest `event` row about the account (None: its person or the operator)."""
    return {user_id: actor for user_id, actor in bind.execute(
        sa.select(audit.c.user_id, audit.c.actor_id).where(audit.c.event == event, audit.c.user_id.is_not(None))
        .order_by(audit.c.id))}


def _set(bind: sa.Connection, table: sa.TableClause, column: str, values: dict[int, int]) -> None:
    if values:
        bind.execute(table.update().where(table.c.id == sa.bindparam("row")).values({column: sa.bindparam("course")}),
                     [{"row": row, "course": course} for row, course in values.items()])


def _fill() -> None:
    bind = op.get_bind()
    admins = set(bind.scalars(sa.select(users.c.id).where(users.c.site_admin == sa.true())))
    unused = {login: uid for uid, login in bind.execute(sa.select(users.c.id, users.c.username)
                                                        .where(users.c.first_login_at.is_(None)))}
    addressed = set(bind.scalars(sa.select(users.c.id).where(users.c.first_login_at.is_(None),
                                                             users.c.email.is_not(None))))
    first_course = {uid: course for uid, course in bind.execute(
        sa.select(enrollments.c.user_id, sa.func.min(enrollments.c.course_id)).group_by(enrollments.c.user_id))}
    made = _made_by_roster(bind, unused, admins)
    passwords_set = _newest_actor(bind, "password_changed")
    _set(bind, users, "password_set_up_by_course_id", {uid: c for uid, c in made.items() if uid not in passwords_set})
    email_by = _newest_actor(bind, "email_changed")
    by_staff = {uid for uid, actor in email_by.items() if actor is not None and actor != uid and actor not in admins}
    email_course = {uid: made[uid] for uid in made if uid not in email_by}
    email_course.update({uid: first_course[uid] for uid in by_staff if uid in first_course})
    _set(bind, users, "email_set_up_by_course_id", {uid: c for uid, c in email_course.items() if uid in addressed})
    live = bind.execute(sa.select(resets.c.id, resets.c.user_id).where(
        resets.c.used_at.is_(None), resets.c.expires_at > datetime.now(UTC), resets.c.issued_by_id.is_not(None),
        resets.c.issued_by_id.not_in(list(admins) or [0])))
    never_used = set(unused.values())
    _set(bind, resets, "set_up_by_course_id", {row: first_course[uid] for row, uid in live
                                               if uid in never_used and uid in first_course})


def upgrade() -> None:
    for table, column, key in _COLUMNS:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column(column, sa.Integer(), nullable=True))
            batch.create_foreign_key(key, "courses", [column], ["id"], ondelete="SET NULL")
    _fill()


def downgrade() -> None:
    for table, column, key in reversed(_COLUMNS):
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(key, type_="foreignkey")
            batch.drop_column(column)
