"""Run quotas per course and per assignment, and the powers a course gives its TAs (issue 51):
courses.quota_runs and assignments.quota_runs (graded runs each student may start per assignment
in the quota window; null: the course's, then the service's KG_QUOTA_RUNS) and courses.ta_powers
(what its instructors let its TAs do besides viewing and grading: extend, queue, schedule,
comma-separated; empty, as for every existing course: nothing more, as before).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("courses") as batch:
        batch.add_column(sa.Column("quota_runs", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("ta_powers", sa.String(64), nullable=False, server_default=""))
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("quota_runs", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("quota_runs")
    with op.batch_alter_table("courses") as batch:
        batch.drop_column("ta_powers")
        batch.drop_column("quota_runs")
