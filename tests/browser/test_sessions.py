"""Sessions that end at a deadline, in a real Chromium: an upload sent after the session
expired lands on the login page saying that the file must be chosen again (nothing is
recorded), a login goes back to the page that asked for it, a session that ended is named as
such, and a login never sends the browser to another site."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta
from urllib.parse import quote

import pytest
from playwright.sync_api import BrowserContext, Page, expect
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Submission, User, WebSession, utcnow
from grader.passwords import set_password
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.zips import small_zip

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def student(sessions: sessionmaker[Session]) -> str:
    name = f"deadline-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    return name


def _fill_login(page: Page, username: str) -> None:
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def _end_sessions(sessions: sessionmaker[Session], username: str) -> None:
    """The user's sessions expire now, as at the end of KG_SESSION_MAX_AGE_S."""
    with session_scope(sessions) as session:
        user_id = session.scalar(select(User.id).where(User.username == username))
        session.execute(update(WebSession).where(WebSession.user_id == user_id)
                        .values(expires_at=utcnow() - timedelta(seconds=1)))


def _submissions(sessions: sessionmaker[Session], username: str) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count()).select_from(Submission).join(User)
                                  .where(User.username == username)) or 0)


def test_an_upload_after_the_session_ended_says_to_choose_the_file_again(
        context: BrowserContext, sessions: sessionmaker[Session], student: str, base_url: str) -> None:
    page = context.new_page()
    page.goto("/login")
    _fill_login(page, student)
    expect(page.get_by_role("heading", name="Submit your assignment")).to_be_visible()
    page.get_by_label(re.compile("Submission")).set_input_files(
        {"name": "hw.zip", "mimeType": "application/zip", "buffer": small_zip()})
    _end_sessions(sessions, student)
    page.get_by_role("button", name="Upload and grade").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    expect(page.locator("#login-notice")).to_have_text(
        "Your session ended before the upload arrived, so the file was not kept. "
        "Log in, then choose the file again and upload it.")
    assert _submissions(sessions, student) == 0
    _fill_login(page, student)
    expect(page).to_have_url(f"{base_url}/")
    expect(page.get_by_role("heading", name="Submit your assignment")).to_be_visible()
    # The address of a form sent earlier, opened again (a reload after an error): its page, never a raw 405.
    page.goto("/submit")
    expect(page).to_have_url(f"{base_url}/")
    expect(page.get_by_role("heading", name="Submit your assignment")).to_be_visible()


def test_login_returns_to_the_page_asked_for(context: BrowserContext, sessions: sessionmaker[Session],
                                             student: str, base_url: str) -> None:
    page = context.new_page()
    page.goto("/settings/tokens")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    expect(page.locator("#login-notice")).to_have_count(0)  # nobody was logged in: nothing ended
    _fill_login(page, student)
    expect(page).to_have_url(f"{base_url}/settings/tokens")
    # A session that ends while the student works: the login page says so, and goes back.
    _end_sessions(sessions, student)
    page.goto("/submissions?page=1")
    expect(page.locator("#login-notice")).to_have_text("Your session has ended. Log in again to go on where you were.")
    _fill_login(page, student)
    expect(page).to_have_url(f"{base_url}/submissions?page=1")


@pytest.mark.parametrize("elsewhere", ["//example.org/x", "https://example.org/", "/\\example.org", "javascript:alert(1)"])
def test_login_never_goes_to_another_site(context: BrowserContext, student: str, base_url: str,
                                          elsewhere: str) -> None:
    page = context.new_page()
    page.goto(f"/login?next={quote(elsewhere, safe='')}")
    _fill_login(page, student)
    expect(page).to_have_url(f"{base_url}/")
    expect(page.get_by_role("heading", name="Submit your assignment")).to_be_visible()
