"""Single sign-on in a real Chromium, through the provider's own authorization page
(oidc-provider-mock, tests/fixtures/oidc_provider.py): a new student gets an account with no
password, an existing account is tied at its first sign-in and found by its identity after
(even once the provider calls it by another name), an account tied to another person of the
provider refuses the sign-in, a domain outside KG_SSO_DOMAINS is refused, and with
KG_PASSWORD_LOGIN_ROLES=instructor a student's right password is refused while an
instructor's still logs in."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.audit import Via
from grader.auth.identities import Identity, tie
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import AuditEvent, Enrollment, ExternalIdentity, Role, User
from grader.passwords import set_password
from grader.settings import Settings
from tests.browser.signing_in import audit_events, logged_in_as
from tests.fixtures.oidc_provider import IdentityProvider, identity_provider, sso_service
from tests.fixtures.passwords import SUITE_ARGON2

LABEL = "Sign in with Example University"
PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def provider() -> Iterator[IdentityProvider]:
    with identity_provider() as p:
        yield p


@pytest.fixture(scope="module")
def service(settings_env: dict[str, str], settings: Settings, provider: IdentityProvider) -> Iterator[Settings]:
    with sso_service(settings_env, provider, KG_SSO_DOMAINS="example.edu", KG_PASSWORD_LOGIN_ROLES="instructor") as s:
        yield s


@pytest.fixture
def page(browser: Browser, service: Settings) -> Iterator[Page]:
    """A fresh browser (cookies) on the service."""
    ctx: BrowserContext = browser.new_context(base_url=service.public_url, viewport={"width": 1100, "height": 800})
    ctx.set_default_timeout(15_000)
    yield ctx.new_page()
    ctx.close()


def _person(provider: IdentityProvider, login: str, email: str | None = None) -> str:
    """A new person at the provider whose preferred_username is `login`: their subject."""
    sub = f"sub-{uuid.uuid4().hex}"
    provider.set_user(sub, {"preferred_username": login, "email": email or f"{login.lower()}@example.edu",
                            "name": "Sam Student"})
    return sub


def _sign_in(page: Page, sub: str, start: str = "/login") -> None:
    """The service's button, then the provider's page: the subject typed, Authorize."""
    page.goto(start)
    page.get_by_role("link", name=LABEL).click()
    page.get_by_placeholder("sub").fill(sub)
    page.get_by_role("button", name="Authorize").click()


def _user(sessions: sessionmaker[Session], login: str) -> User:
    with session_scope(sessions) as session:
        user = session.scalar(select(User).where(User.login_key == login.lower()))
        assert user is not None
        session.expunge(user)
        return user


def _identities(sessions: sessionmaker[Session], user_id: int) -> list[str]:
    with session_scope(sessions) as session:
        return list(session.scalars(select(ExternalIdentity.subject).where(ExternalIdentity.user_id == user_id)))


def test_a_new_student_signs_in_and_gets_an_account_with_no_password_and_no_course(
        page: Page, provider: IdentityProvider, sessions: sessionmaker[Session], service: Settings) -> None:
    login = f"newbie-{uuid.uuid4().hex[:8]}"
    sub = _person(provider, login)
    _sign_in(page, sub, start="/login?next=/settings/tokens")
    expect(page).to_have_url(f"{service.public_url}/settings/tokens")  # where the login page was asked to go
    logged_in_as(page, login)
    user = _user(sessions, login)
    assert user.role is Role.student and user.password_hash is None and user.first_login_at is not None
    assert (user.full_name, user.email) == ("Sam Student", f"{login}@example.edu")
    assert _identities(sessions, user.id) == [sub]
    assert audit_events(sessions, user.id) == [("identity_linked", "sso"), ("login", "sso")]
    with session_scope(sessions) as session:
        assert session.scalars(select(Enrollment).where(Enrollment.user_id == user.id)).all() == []


def test_an_existing_account_is_tied_at_its_first_sign_in_and_found_by_its_identity_after(
        browser: Browser, page: Page, provider: IdentityProvider, sessions: sessionmaker[Session],
        service: Settings) -> None:
    login = f"known-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        get_or_create_user(session, login, Role.student).email = "kept@example.edu"
    sub = _person(provider, login.upper())  # the provider's spelling of the login differs by case only
    _sign_in(page, sub)
    logged_in_as(page, login)
    user = _user(sessions, login)
    assert _identities(sessions, user.id) == [sub] and user.email == "kept@example.edu"  # the account's own kept

    # A second sign-in, in another browser, after the provider renamed the person: the identity decides
    provider.set_user(sub, {"preferred_username": f"renamed-{uuid.uuid4().hex[:6]}", "email": "r@example.edu"})
    ctx = browser.new_context(base_url=service.public_url)
    again = ctx.new_page()
    _sign_in(again, sub)
    logged_in_as(again, login)
    ctx.close()
    assert _identities(sessions, user.id) == [sub]
    assert [e for e in audit_events(sessions, user.id) if e[1] == "sso"] == [
        ("identity_linked", "sso"), ("login", "sso"), ("login", "sso")]


def test_an_account_tied_to_another_person_refuses_the_sign_in(
        page: Page, provider: IdentityProvider, sessions: sessionmaker[Session], service: Settings) -> None:
    login = f"taken-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        owner = get_or_create_user(session, login, Role.student)
        tie(session, Identity(service.sso.issuer, f"sub-owner-{login}", "sso"), owner, Via.sso)
    newcomer = _person(provider, login)  # the provider gave the login to someone else since
    _sign_in(page, newcomer)
    expect(page.get_by_role("heading", name="Log in", exact=True)).to_be_visible()
    expect(page.locator("#login-error")).to_have_text(
        f"The account “{login}” here is tied to another person's university sign-in, so nobody was logged in. "
        "If the account is yours, ask a site administrator of this service.")
    user = _user(sessions, login)
    assert _identities(sessions, user.id) == [f"sub-owner-{login}"]
    assert audit_events(sessions, user.id)[-2:] == [("identity_refused", "sso"), ("login_failed", "sso")]


def test_a_sign_in_from_another_domain_is_refused(
        page: Page, provider: IdentityProvider, sessions: sessionmaker[Session]) -> None:
    login = f"outsider-{uuid.uuid4().hex[:8]}"
    _sign_in(page, _person(provider, login, email=f"{login}@elsewhere.example.org"))
    expect(page.locator("#login-error")).to_have_text(
        f"Only @example.edu accounts may sign in here, and you signed in as {login}@elsewhere.example.org, so "
        "nobody was logged in.")
    with session_scope(sessions) as session:
        assert session.scalar(select(User).where(User.username == login)) is None
        refused = session.scalars(select(AuditEvent).where(AuditEvent.login == login)).all()
        assert [(e.event, e.via) for e in refused] == [("login_failed", "sso")]


def test_password_login_is_off_for_students_and_on_for_instructors(
        page: Page, sessions: sessionmaker[Session], screenshot_dir: Path) -> None:
    student, instructor = f"pw-student-{uuid.uuid4().hex[:6]}", f"pw-prof-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        for login, role in ((student, Role.student), (instructor, Role.instructor)):
            set_password(get_or_create_user(session, login, role), PASSWORD, SUITE_ARGON2)
    page.goto("/login")
    expect(page.locator("#password-roles")).to_have_text(
        f"Student accounts do not log in with a password here: they use the “{LABEL}” button.")
    for login in (student, instructor):
        page.get_by_label("Username").fill(login)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in", exact=True).click()
        if login == student:
            expect(page.locator("#login-error")).to_have_text(
                f"Password login is off for student accounts on this service: use the “{LABEL}” button instead.")
            page.screenshot(path=str(screenshot_dir / "login-sso.png"), full_page=True)
    logged_in_as(page, instructor)
    assert ("refused", "web") in audit_events(sessions, _user(sessions, student).id)
