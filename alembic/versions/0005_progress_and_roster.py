"""runs.progress (which stage/problem a worker is on) and users.full_name, users.section (roster)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("progress", sa.JSON(), nullable=True))
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("full_name", sa.String(length=256), nullable=True))
        batch.add_column(sa.Column("section", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("section")
        batch.drop_column("full_name")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("progress")
