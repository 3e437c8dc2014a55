"""SAML single sign-on in a real Chromium, through the identity provider's own sign-in page
(pysaml2's IdP side, tests/fixtures/saml_idp.py, on http://localhost: another site than the
service's, so its answer is a cross-site post that carries no session cookie of ours, and the
service's own page posts it again). The provider encrypts its assertions to the service's
certificate, as Shibboleth does. A new student gets an account with no password; an existing
account is tied at its first sign-in and found by its identity after."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.saml import ACS_PATH
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ExternalIdentity, Role, User
from grader.settings import Settings
from tests.browser.signing_in import audit_events, logged_in_as
from tests.fixtures.saml_idp import IdentityProvider, identity_provider, saml_service

LABEL = "Sign in with Example University (SAML)"
EPPN = "eduPersonPrincipalName"


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with identity_provider() as p:
        p.encrypt = True
        yield p


@pytest.fixture(scope="module")
def service(settings_env: dict[str, str], settings: Settings, idp: IdentityProvider) -> Iterator[Settings]:
    with saml_service(settings_env, idp) as s:
        yield s


@pytest.fixture
def page(browser: Browser, service: Settings) -> Iterator[Page]:
    """A fresh browser (cookies) on the service."""
    ctx: BrowserContext = browser.new_context(base_url=service.public_url, viewport={"width": 1100, "height": 800})
    ctx.set_default_timeout(15_000)
    yield ctx.new_page()
    ctx.close()


def _sign_in(page: Page, user: str, start: str = "/login") -> None:
    """The service's button, then the provider's page: the user typed, Sign in; back once the
    answer's posts (the provider's page, then the service's) have landed on a page of the service."""
    page.goto(start)
    service = page.url.split("/login")[0]
    page.get_by_role("link", name=LABEL).click()
    page.get_by_label("User").fill(user)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: url.startswith(service + "/") and not url.startswith(service + ACS_PATH))


def _user(sessions: sessionmaker[Session], login: str) -> User:
    with session_scope(sessions) as session:
        user = session.scalar(select(User).where(User.login_key == login.lower()))
        assert user is not None
        session.expunge(user)
        return user


def _ties(sessions: sessionmaker[Session], user_id: int) -> list[tuple[str, str, str]]:
    with session_scope(sessions) as session:
        return [(t.issuer, t.subject, t.kind) for t in
                session.scalars(select(ExternalIdentity).where(ExternalIdentity.user_id == user_id))]


def test_a_new_student_signs_in_and_gets_an_account_with_no_password(
        page: Page, idp: IdentityProvider, sessions: sessionmaker[Session], service: Settings) -> None:
    login = f"saml-new-{uuid.uuid4().hex[:8]}"
    pid = f"pid-{uuid.uuid4().hex}"
    idp.set_user(login, {EPPN: [f"{login}@example.edu"], "mail": [f"{login}@example.edu"],
                         "givenName": ["Sam"], "sn": ["Student"]}, persistent_id=pid)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.headers.get("origin", "")) if r.url.endswith(ACS_PATH) else None)
    _sign_in(page, login, start="/login?next=/settings/tokens")
    expect(page).to_have_url(f"{service.public_url}/settings/tokens")  # where the login page was asked to go
    # The provider's cross-site post came without the session cookie: the service's page posted it again
    assert posts == [idp.url, service.public_url]
    account = f"{login}@example.edu"  # the eduPersonPrincipalName is the login
    logged_in_as(page, account)
    user = _user(sessions, account)
    assert user.role is Role.student and user.password_hash is None and user.first_login_at is not None
    assert (user.full_name, user.email) == ("Sam Student", f"{login}@example.edu")
    assert _ties(sessions, user.id) == [(idp.entity_id, pid, "saml")]
    assert audit_events(sessions, user.id) == [("identity_linked", "saml"), ("login", "saml")]


def test_an_existing_account_is_tied_at_its_first_sign_in_and_found_by_its_identity_after(
        browser: Browser, page: Page, idp: IdentityProvider, sessions: sessionmaker[Session],
        service: Settings) -> None:
    login = f"saml-known-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        get_or_create_user(session, login, Role.student).email = "kept@example.edu"
    pid = f"pid-{uuid.uuid4().hex}"
    idp.set_user(login, {EPPN: [login.upper()], "displayName": ["Kim Known"]}, persistent_id=pid)
    _sign_in(page, login)
    logged_in_as(page, login)
    user = _user(sessions, login)
    assert _ties(sessions, user.id) == [(idp.entity_id, pid, "saml")] and user.email == "kept@example.edu"

    # A second sign-in, in another browser, after the provider renamed the person: the NameID decides
    idp.set_user(login, {EPPN: [f"renamed-{uuid.uuid4().hex[:6]}"]}, persistent_id=pid)
    ctx = browser.new_context(base_url=service.public_url)
    again = ctx.new_page()
    _sign_in(again, login)
    logged_in_as(again, login)
    ctx.close()
    assert _ties(sessions, user.id) == [(idp.entity_id, pid, "saml")]
    assert [e for e in audit_events(sessions, user.id) if e[1] == "saml"] == [
        ("identity_linked", "saml"), ("login", "saml"), ("login", "saml")]
