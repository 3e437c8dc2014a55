"""Known public solutions of an assignment (issue 51): assignments.similarity_sources, the list
of sources staff give for the similarity check to match every student against
(grader.similarity.public). Empty on every existing assignment: none is listed.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("similarity_sources", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("similarity_sources")
