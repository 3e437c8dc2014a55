"""Storage bounded per student, and the upload rate limit shared by every web process (issue 54):
assignments.storage_quota_bytes (the bytes each student may keep in the assignment; null: the
service's KG_STORAGE_QUOTA_BYTES) and upload_hits (each counted upload attempt: who sent it and
when, read by grader/ratelimit.py). Nothing existing changes.

Revision ID: 0022
Revises: 0020
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("storage_quota_bytes", sa.BigInteger(), nullable=True))
    op.create_table(
        "upload_hits",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("sender", sa.String(300), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_upload_hits_sender_at", "upload_hits", ["sender", "at"])


def downgrade() -> None:
    op.drop_index("ix_upload_hits_sender_at", table_name="upload_hits")
    op.drop_table("upload_hits")
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("storage_quota_bytes")
