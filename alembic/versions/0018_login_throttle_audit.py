"""Logins that cannot be guessed: users.login_key (the login case-folded, unique), the throttle's
failed attempts per account and per client address (login_throttles, shared by every web
process) and the audit log (audit_events) (grader.auth.throttle, grader.auth.audit)

Accounts whose logins differ only by case are not merged: none of them gets a login_key (each
keeps logging in by its exact name, as before), and the upgrade names them on stderr so that
the operator can rename one (`grader user rename`).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""
from __future__ import annotations

import sys
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _key(username: str) -> str:
    # grader.auth.logins.login_key as of this revision
    return username.strip().casefold()


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("login_key", sa.String(length=128), nullable=True))
    users = sa.table("users", sa.column("id", sa.Integer()), sa.column("username", sa.String()),
                     sa.column("login_key", sa.String()))
    conn = op.get_bind()
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for user_id, username in conn.execute(sa.select(users.c.id, users.c.username)):
        groups[_key(username)].append((user_id, username))
    for key, members in groups.items():
        if len(members) == 1:
            conn.execute(users.update().where(users.c.id == members[0][0]).values(login_key=key))
        else:
            names = ", ".join(f"{name!r} (id {user_id})" for user_id, name in members)
            print(f"0018: logins differ only by case, left case-sensitive (each logs in by its exact name): "
                  f"{names}; rename all but one with `grader user rename OLD NEW`", file=sys.stderr)
    op.create_index("ix_users_login_key", "users", ["login_key"], unique=True)

    op.create_table(
        "login_throttles",
        sa.Column("key", sa.String(length=300), primary_key=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("blocked_until", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("via", sa.String(length=8), nullable=False),
        sa.Column("actor_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="SET NULL"), nullable=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="SET NULL"), nullable=True),
        sa.Column("login", sa.String(length=256), nullable=True),
        sa.Column("address", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.String(length=512), nullable=False),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_index("ix_audit_events_user_id", "audit_events", ["user_id"])


def downgrade() -> None:
    op.drop_table("audit_events")
    op.drop_table("login_throttles")
    op.drop_index("ix_users_login_key", table_name="users")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("login_key")
