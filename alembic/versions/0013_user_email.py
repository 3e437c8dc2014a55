"""users.email: where the grader sends a student's run notices (grader/notify.py), filled by the
roster import; accounts whose login is an e-mail address (the roster's old form) get it as their
address

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("email", sa.String(length=256), nullable=True))
    op.execute("UPDATE users SET email = username WHERE username LIKE '%_@_%._%'")


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("email")
