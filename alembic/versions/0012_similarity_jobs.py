"""similarity_jobs: an assignment's similarity report computed by a worker in the background
(queued, running, done or failed, with progress and the reason of a failure); and
assignments.similarity_base: the starter its students received, as staff set it
(grader/similarity/jobs.py, grader/similarity/base.py)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "similarity_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("requested_by", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("files_done", sa.Integer(), nullable=False),
        sa.Column("files_total", sa.Integer(), nullable=False),
        sa.Column("base", sa.String(length=512), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["assignment_id"], ["assignments.id"]),
        sa.ForeignKeyConstraint(["requested_by"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_similarity_jobs_assignment", "similarity_jobs", ["assignment_id"])
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("similarity_base", sa.String(length=512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("similarity_base")
    op.drop_index("ix_similarity_jobs_assignment", table_name="similarity_jobs")
    op.drop_table("similarity_jobs")
