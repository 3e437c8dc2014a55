"""Accounts that belong to their people (grader/auth/ownership.py): users.site_admin (the site
role that may change any account's login, password and e-mail, made by `grader user admin`),
users.first_login_at (when the account's person first used it; until then, and only then, an
instructor of every course it is in may give it a first-login link) and users.staff_mail (the
person's choice to get the mail of the courses they staff: new regrade requests, failed
grading; on by default)

first_login_at is filled from what shows an account was used: its first successful login or
reset link used (audit_events), its first browser session (web_sessions), an API token of its
used (api_tokens.last_used_at) or its first upload (submissions). Each of these is a moment the
account was already in use, so the earliest is at or after its real first login; an account
with none of them is taken as never used, the one case in which an instructor may give it a
link. No account becomes an administrator: the operator names them (docs/deploy.md).

Downgrading drops the three columns.

Revision ID: 0023
Revises: 0021
Create Date: 2026-12-06
"""
from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_utc = sa.DateTime(timezone=True)
users = sa.table("users", sa.column("id", sa.Integer()), sa.column("first_login_at", _utc))
# (table, its account column, the instant it shows the account in use, a condition or None)
_EVIDENCE = (
    ("audit_events", "user_id", "at", "event IN ('login', 'reset_used')"),
    ("web_sessions", "user_id", "created_at", None),
    ("api_tokens", "user_id", "last_used_at", "last_used_at IS NOT NULL"),
    ("submissions", "user_id", "uploaded_at", None),
)


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _first_use() -> dict[int, datetime]:
    """user id -> the earliest instant any evidence shows the account in use."""
    first: dict[int, datetime] = {}
    bind = op.get_bind()
    for table, account, instant, condition in _EVIDENCE:
        rows = sa.table(table, sa.column(account, sa.Integer()), sa.column(instant, _utc))
        query = sa.select(rows.c[account], sa.func.min(rows.c[instant])).where(rows.c[account].is_not(None))
        if condition is not None:
            query = query.where(sa.text(condition))
        for user_id, when in bind.execute(query.group_by(rows.c[account])):
            if when is not None:
                when = _aware(when if isinstance(when, datetime) else datetime.fromisoformat(when))
                first[user_id] = min(first.get(user_id, when), when)
    return first


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("site_admin", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("first_login_at", _utc, nullable=True))
        batch.add_column(sa.Column("staff_mail", sa.Boolean(), nullable=False, server_default=sa.true()))
    first = _first_use()
    if first:
        op.get_bind().execute(users.update().where(users.c.id == sa.bindparam("uid"))
                              .values(first_login_at=sa.bindparam("at")),
                              [{"uid": uid, "at": at} for uid, at in first.items()])


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("staff_mail")
        batch.drop_column("first_login_at")
        batch.drop_column("site_admin")
