"""What happened to each GPU's worker under `grader worker --gpus` (issue 52): gpu_worker_events,
one row per first start, restart and leaving out of a GPU's worker, written by the supervisor
(grader.gpu_events) and shown to site administrators on /ops/workers. Empty at first.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_worker_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("gpu_uuid", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("signal", sa.Integer(), nullable=True),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_gpu_worker_events_gpu", "gpu_worker_events", ["host", "gpu_index", "id"])
    op.create_index("ix_gpu_worker_events_at", "gpu_worker_events", ["at"])


def downgrade() -> None:
    op.drop_index("ix_gpu_worker_events_at", table_name="gpu_worker_events")
    op.drop_index("ix_gpu_worker_events_gpu", table_name="gpu_worker_events")
    op.drop_table("gpu_worker_events")
