"""Password reset links (grader.auth.password_reset): issued by a site administrator for anyone,
or by an instructor as a first-login link for a student of their own course who never logged in
(the rules: test_account_ownership.py), shown once; the link sets a new password once, ends
the student's sessions, expires, and is refused when used again."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.password_reset import issue_reset
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Course, PasswordReset, Role, User, utcnow
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_settings import PASSWORD, Browser

NEW_PASSWORD = "a brand new passphrase"
LINK = re.compile(r'<code id="reset-link">(/reset/[^<]+)</code>')  # a path: no KG_PUBLIC_URL here


@dataclass
class People:
    student: str  # of hw4
    outsider: str  # a student of another assignment only
    prof: str  # staff of hw4
    colleague: str  # another instructor of hw4
    admin: str  # a site administrator, in no course


@pytest.fixture
def people(sessions: sessionmaker[Session]) -> People:
    tag = uuid.uuid4().hex[:6]
    found = People(f"rs-stu-{tag}", f"rs-out-{tag}", f"rs-prof-{tag}", f"rs-col-{tag}", f"rs-adm-{tag}")
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        other = Assignment(slug=f"rs-{tag}", title="Other course", course=Course(slug=f"rs-{tag}", title="Other course"), total_points=100)
        session.add(other)
        session.flush()
        for login, role, assignment in ((found.student, Role.student, hw4), (found.outsider, Role.student, other),
                                        (found.prof, Role.instructor, hw4), (found.colleague, Role.instructor, hw4)):
            set_password(get_or_create_user(session, login, role, [assignment.course]), PASSWORD, SUITE_ARGON2)
        admin = get_or_create_user(session, found.admin, Role.student, [])
        admin.site_admin = True
        set_password(admin, PASSWORD, SUITE_ARGON2)
    return found


def _issue(prof: Browser, username: str) -> tuple[int, str | None]:
    response = prof.client.post("/roster/reset-link", data={"csrf_token": prof.page_csrf("/roster"),
                                                            "username": username})
    found = LINK.search(response.text)
    return response.status_code, found.group(1) if found else None


def _admin_issues(admin: Browser, username: str) -> str:
    """The reset link a site administrator issues on the account's page."""
    response = admin.client.post(f"/accounts/{username}/reset-link",
                                 data={"csrf_token": admin.page_csrf(f"/accounts/{username}")})
    found = LINK.search(response.text)
    assert response.status_code == 200 and found, response.text[:600]
    return found.group(1)


def _can_log_in(settings: Settings, username: str, password: str) -> bool:
    client = TestClient(create_app(settings))
    csrf = Browser.csrf(client.get("/login").text)
    response = client.post("/login", data={"csrf_token": csrf, "username": username, "password": password},
                           follow_redirects=False)
    return response.status_code == 303


def _set(client: TestClient, link: str, new: str, again: str | None = None, csrf: bool = True) -> Response:
    """POST the reset form of `link` as the (anonymous) browser `client`."""
    data = {"new": new, "again": new if again is None else again}
    if csrf:  # the login page carries the same session's token, whether or not the link is valid
        data["csrf_token"] = Browser.csrf(client.get("/login").text)
    return client.post(link, data=data)


def test_link_works_once_and_ends_the_students_sessions(settings: Settings, people: People) -> None:
    student = Browser(settings, people.student)  # a session from before the reset
    assert student.client.get("/submissions").status_code == 200
    link = _admin_issues(Browser(settings, people.admin), people.student)  # logged in: theirs, no instructor's
    anonymous = TestClient(create_app(settings))
    form = anonymous.get(link)
    assert form.status_code == 200 and form.headers["cache-control"] == "no-store" and 'name="new"' in form.text
    # refusals that leave the link usable: a mismatch, a short password, no CSRF token
    assert _set(anonymous, link, NEW_PASSWORD, NEW_PASSWORD + "x").status_code == 400
    assert "at least 8 characters" in _set(anonymous, link, "short1").text
    assert _set(anonymous, link, NEW_PASSWORD, csrf=False).status_code == 403
    assert _can_log_in(settings, people.student, PASSWORD)

    done = _set(anonymous, link, NEW_PASSWORD)
    assert done.status_code == 200 and 'id="reset-done"' in done.text
    # the old session has ended: the login page, told so, and where to go back to
    ended = urlsplit(student.client.get("/submissions", follow_redirects=False).headers["location"])
    assert ended.path == "/login" and parse_qs(ended.query, strict_parsing=True) == {
        "next": ["/submissions"], "ended": ["session"]}
    assert _can_log_in(settings, people.student, NEW_PASSWORD)
    assert not _can_log_in(settings, people.student, PASSWORD)

    # used: refused, and the password stays
    again = TestClient(create_app(settings))
    assert again.get(link).status_code == 404
    reused = _set(again, link, "yet another passphrase")
    assert reused.status_code == 404 and "not valid" in reused.text
    assert _can_log_in(settings, people.student, NEW_PASSWORD)


def test_link_expires(settings: Settings, sessions: sessionmaker[Session], people: People) -> None:
    code, link = _issue(Browser(settings, people.prof), people.student)
    assert code == 200 and link is not None
    with session_scope(sessions) as session:
        row = session.scalar(select(PasswordReset).order_by(PasswordReset.id.desc()))
        assert row is not None
        assert row.expires_at - row.created_at == timedelta(seconds=settings.password_reset_max_age_s)
        row.expires_at = utcnow() - timedelta(seconds=1)
    client = TestClient(create_app(settings))
    assert client.get(link).status_code == 404
    assert _set(client, link, NEW_PASSWORD).status_code == 404
    assert _can_log_in(settings, people.student, PASSWORD) and not _can_log_in(settings, people.student, NEW_PASSWORD)


def test_a_new_password_voids_the_other_links(settings: Settings, sessions: sessionmaker[Session],
                                              people: People) -> None:
    with session_scope(sessions) as session:
        user = session.scalar(select(User).where(User.username == people.student))
        assert user is not None
        first, second = (issue_reset(session, user, 600) for _ in range(2))
    client = TestClient(create_app(settings))
    assert _set(client, f"/reset/{first}", NEW_PASSWORD).status_code == 200
    assert client.get(f"/reset/{second}").status_code == 404


def test_instructors_issue_links_only_for_students_of_their_assignments(
        settings: Settings, sessions: sessionmaker[Session], people: People) -> None:
    """Outside their courses the account reads as absent; an instructor's (a colleague's, their
    own) is refused in words."""
    prof = Browser(settings, people.prof)
    with session_scope(sessions) as session:
        before = session.scalar(select(func.count(PasswordReset.id)))
    for target, code_wanted in ((people.outsider, 404), (people.colleague, 403), (people.prof, 403),
                                ("nobody-" + people.student, 404)):
        code, link = _issue(prof, target)
        assert code == code_wanted and link is None, target
    with session_scope(sessions) as session:
        assert session.scalar(select(func.count(PasswordReset.id))) == before
    student = Browser(settings, people.student)  # a student has no roster page to issue from
    refused = student.client.post("/roster/reset-link", data={"csrf_token": student.page_csrf(),
                                                              "username": people.student})
    assert refused.status_code == 403
