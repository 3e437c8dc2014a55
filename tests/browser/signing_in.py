"""What the single sign-on pages' tests (OIDC and SAML) read after a sign-in: the account's audit
events, and whether the browser is logged in as whom."""
from __future__ import annotations

from playwright.sync_api import Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.models import AuditEvent


def audit_events(sessions: sessionmaker[Session], user_id: int) -> list[tuple[str, str]]:
    """(event, via) of the account's audit events, oldest first."""
    with session_scope(sessions) as session:
        return [(e.event, e.via) for e in session.scalars(select(AuditEvent).where(AuditEvent.user_id == user_id)
                                                            .order_by(AuditEvent.id))]


def logged_in_as(page: Page, login: str) -> None:
    page.goto("/settings/tokens")
    expect(page).to_have_url(f"{page.url.split('/settings')[0]}/settings/tokens")
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    expect(page.locator("header")).to_contain_text(login)
