"""The run page's opt-in browser notification, in Chromium with the notifications permission
really granted: ticked (and remembered across pages), the page fires a Notification with the
result once the followed run ends; not ticked, none; where the API is missing, no opt-in.
`window.Notification` is wrapped by an init script that makes the real notification and
records it."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ErrorClass, Role, Run, RunState, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.browser.a11y import check_page
from tests.fixtures.passwords import SUITE_ARGON2

PASSWORD = "correct horse battery"
SPY = """(() => {
  if (!("Notification" in window)) return;
  const Real = window.Notification;
  window.kgNotices = [];
  function Spy(title, options) {
    const made = new Real(title, options);  // recorded only once the real one is made
    window.kgNotices.push({ title: title, body: (options || {}).body });
    return made;
  }
  Spy.prototype = Real.prototype;
  Spy.requestPermission = (cb) => Real.requestPermission(cb);
  Object.defineProperty(Spy, "permission", { get: () => Real.permission });
  window.Notification = Spy;
})();"""


@pytest.fixture(scope="module")
def student(sessions: sessionmaker[Session]) -> str:
    login = f"nina-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, login, Role.student), PASSWORD, SUITE_ARGON2)
    return login


@pytest.fixture
def granted(browser: Browser, base_url: str) -> Iterator[BrowserContext]:
    """A context whose site may notify, with the spy in every page."""
    ctx = browser.new_context(base_url=base_url, permissions=["notifications"])
    ctx.set_default_timeout(15_000)
    ctx.add_init_script(SPY)
    yield ctx
    ctx.close()


def _queued_run(settings: Settings, sessions: sessionmaker[Session], login: str) -> int:
    """A queued run no worker holds (it is never sent): the test ends it."""
    blob = BlobStore(settings.blob_dir).put_bytes(uuid.uuid4().bytes)
    with session_scope(sessions) as session:
        user = get_or_create_user(session, login, Role.student)
        _sub, run = record_submission(session, user, get_assignment(session, "hw4"), "notify.zip", blob)
        return run.id


def _end(sessions: sessionmaker[Session], run_id: int, **values: Any) -> None:
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.id == run_id).values(
            state=RunState.failed, finished_at=utcnow(), error_class=ErrorClass.timeout,
            message="Grading stopped: time limit.", **values))


def _run_page(context: BrowserContext, login: str, run_id: int) -> Page:
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(login)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run-state")).to_have_text("queued")
    return page


def _notices(page: Page, wait_s: float = 0.5) -> list[dict[str, str]]:
    """The notifications the page made, once there are some or after `wait_s` (the page's CSP
    forbids the eval that wait_for_function would use)."""
    deadline = time.monotonic() + wait_s
    while True:
        notices: list[dict[str, str]] = page.evaluate("window.kgNotices")
        if notices or time.monotonic() > deadline:
            return notices
        page.wait_for_timeout(100)


def test_the_opt_in_notifies_when_the_run_ends(granted: BrowserContext, settings: Settings,
                                               sessions: sessionmaker[Session], student: str) -> None:
    first = _queued_run(settings, sessions, student)
    page = _run_page(granted, student, first)
    choice = page.get_by_label("Notify me when grading ends")
    expect(choice).to_be_visible()
    expect(choice).not_to_be_checked()
    check_page(page)
    choice.check()
    assert page.evaluate("localStorage.getItem('kg-notify')") == "on"
    # Remembered: another run's page starts ticked.
    second = _queued_run(settings, sessions, student)
    page.goto(f"/runs/{second}")
    expect(page.get_by_label("Notify me when grading ends")).to_be_checked()
    assert _notices(page) == []
    _end(sessions, second)
    expect(page.locator("#run-state")).to_have_text("failed")  # the page reloaded with the result
    assert _notices(page, wait_s=5) == [
        {"title": f"Run {second}: failed", "body": "Grading stopped: time limit."}]
    expect(page.get_by_label("Notify me when grading ends")).to_have_count(0)  # a final run has nothing to follow
    page.reload()  # opening the ended run again notifies no more
    assert _notices(page) == []
    # Unticked: the run ends without a notification.
    page.goto(f"/runs/{first}")
    page.get_by_label("Notify me when grading ends").uncheck()
    _end(sessions, first)
    expect(page.locator("#run-state")).to_have_text("failed")
    assert _notices(page) == []


def test_without_the_notification_api_there_is_no_opt_in(browser: Browser, base_url: str, settings: Settings,
                                                         sessions: sessionmaker[Session], student: str) -> None:
    ctx = browser.new_context(base_url=base_url)
    ctx.add_init_script("delete window.Notification;")
    try:
        run_id = _queued_run(settings, sessions, student)
        page = _run_page(ctx, student, run_id)
        expect(page.locator("#notify-optin")).to_be_hidden()
        _end(sessions, run_id)
        expect(page.locator("#run-state")).to_have_text("failed")  # following works as before
    finally:
        ctx.close()


def test_a_refused_permission_unticks_the_opt_in_and_says_so(browser: Browser, base_url: str, settings: Settings,
                                                              sessions: sessionmaker[Session], student: str) -> None:
    ctx = browser.new_context(base_url=base_url)  # the permission is never granted: the request is refused
    try:
        page = _run_page(ctx, student, _queued_run(settings, sessions, student))
        choice = page.get_by_label("Notify me when grading ends")
        choice.check()
        # Headless Chromium answers "denied" to a site never granted it: blocked until the settings change
        expect(page.locator("#notify-note")).to_have_text(
            "Notifications are blocked for this site in your browser's settings.")
        expect(choice).not_to_be_checked()
        expect(choice).to_be_disabled()
        assert page.evaluate("localStorage.getItem('kg-notify')") is None
    finally:
        ctx.close()
