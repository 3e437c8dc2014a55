"""LTI 1.3 and single sign-on (grader/lti, grader/auth/identities.py): external_identities (an
LMS's or the SSO provider's (issuer, subject) tied to one account), the platform registrations
and their deployments, the LMS courses (contexts) and links the tool was launched from, the
OIDC login states (single-use state and nonce), the last grade sent per student and link, and
enrollments.dropped_at (the LMS's roster stopped listing the member).

Downgrading drops them.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_utc = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "external_identities",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("issuer", sa.String(512), nullable=False),
        sa.Column("subject", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("created_at", _utc, nullable=False),
        sa.Column("last_seen_at", _utc, nullable=False),
        sa.UniqueConstraint("issuer", "subject"),
    )
    op.create_index("ix_external_identities_user_id", "external_identities", ["user_id"])
    op.create_table(
        "lti_platforms",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("issuer", sa.String(512), nullable=False),
        sa.Column("client_id", sa.String(256), nullable=False),
        sa.Column("auth_login_url", sa.String(1024), nullable=False),
        sa.Column("auth_token_url", sa.String(1024), nullable=False),
        sa.Column("jwks_url", sa.String(1024), nullable=False),
        sa.Column("created_at", _utc, nullable=False),
        sa.UniqueConstraint("issuer", "client_id"),
    )
    op.create_table(
        "lti_deployments",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("platform_id", sa.Integer(), sa.ForeignKey("lti_platforms.id", ondelete="CASCADE"), nullable=False),
        sa.Column("deployment_id", sa.String(256), nullable=False),
        sa.UniqueConstraint("platform_id", "deployment_id"),
    )
    op.create_table(
        "lti_contexts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("platform_id", sa.Integer(), sa.ForeignKey("lti_platforms.id", ondelete="CASCADE"), nullable=False),
        sa.Column("deployment_id", sa.String(256), nullable=False),
        sa.Column("context_id", sa.String(256), nullable=False),
        sa.Column("title", sa.String(256), nullable=True),
        sa.Column("course_id", sa.Integer(), sa.ForeignKey("courses.id", ondelete="SET NULL"), nullable=True),
        sa.Column("memberships_url", sa.String(1024), nullable=True),
        sa.Column("lineitems_url", sa.String(1024), nullable=True),
        sa.Column("roster_synced_at", _utc, nullable=True),
        sa.UniqueConstraint("platform_id", "context_id"),
    )
    op.create_index("ix_lti_contexts_course_id", "lti_contexts", ["course_id"])
    op.create_table(
        "lti_resource_links",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("context_id", sa.Integer(), sa.ForeignKey("lti_contexts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("resource_link_id", sa.String(256), nullable=False),
        sa.Column("title", sa.String(256), nullable=True),
        sa.Column("assignment_id", sa.Integer(), sa.ForeignKey("assignments.id", ondelete="SET NULL"), nullable=True),
        sa.Column("lineitem_url", sa.String(1024), nullable=True),
        sa.Column("grades_checked_at", _utc, nullable=True),
        sa.UniqueConstraint("context_id", "resource_link_id"),
    )
    op.create_index("ix_lti_resource_links_context_id", "lti_resource_links", ["context_id"])
    op.create_index("ix_lti_resource_links_assignment_id", "lti_resource_links", ["assignment_id"])
    op.create_table(
        "lti_launch_states",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("state_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("nonce", sa.String(64), nullable=False, unique=True),
        sa.Column("platform_id", sa.Integer(), sa.ForeignKey("lti_platforms.id", ondelete="CASCADE"), nullable=False),
        sa.Column("created_at", _utc, nullable=False),
        sa.Column("expires_at", _utc, nullable=False),
        sa.Column("used_at", _utc, nullable=True),
        sa.Column("entry_hash", sa.String(64), nullable=True, unique=True),
        sa.Column("entry_user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
        sa.Column("entry_target", sa.String(512), nullable=True),
        sa.Column("entered_at", _utc, nullable=True),
    )
    op.create_index("ix_lti_launch_states_expires_at", "lti_launch_states", ["expires_at"])
    op.create_table(
        "lti_grade_sends",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("link_id", sa.Integer(), sa.ForeignKey("lti_resource_links.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("points", sa.Float(), nullable=True),
        sa.Column("detail", sa.String(512), nullable=False, server_default=""),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("updated_at", _utc, nullable=False),
        sa.UniqueConstraint("link_id", "user_id"),
    )
    op.create_index("ix_lti_grade_sends_link_id", "lti_grade_sends", ["link_id"])
    with op.batch_alter_table("enrollments") as batch:
        batch.add_column(sa.Column("dropped_at", _utc, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("enrollments") as batch:
        batch.drop_column("dropped_at")
    for table in ("lti_grade_sends", "lti_launch_states", "lti_resource_links", "lti_contexts", "lti_deployments",
                  "lti_platforms", "external_identities"):
        op.drop_table(table)
