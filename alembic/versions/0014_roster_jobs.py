"""roster_jobs: a roster import run by a worker in the background (queued, running, done or
failed, with the students imported so far, the result, and when the new accounts' first
passwords were downloaded, once; grader/course/roster_jobs.py). No password is stored.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "roster_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("requested_by", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("roster", sa.Text(), nullable=True),
        sa.Column("lines_done", sa.Integer(), nullable=False),
        sa.Column("lines_total", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("key_digest", sa.String(length=64), nullable=False),
        sa.Column("passwords_taken_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["assignment_id"], ["assignments.id"]),
        sa.ForeignKeyConstraint(["requested_by"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_roster_jobs_requested_by", "roster_jobs", ["requested_by"])


def downgrade() -> None:
    op.drop_index("ix_roster_jobs_requested_by", table_name="roster_jobs")
    op.drop_table("roster_jobs")
