"""submissions.idempotency_key: the client's Idempotency-Key header of an API upload, unique
per user, so a repeated upload answers with the earlier submission (grader/service.py)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch: SQLite (the embedded default) cannot add a constraint to an existing table
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(length=128), nullable=True))
        batch.create_unique_constraint("uq_submissions_user_idempotency_key", ["user_id", "idempotency_key"])


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_constraint("uq_submissions_user_idempotency_key", type_="unique")
        batch.drop_column("idempotency_key")
