"""Run quotas per course and per assignment (issue 51; real PostgreSQL): an instructor sets the
course's quota on its page and an assignment's own on its settings page (a bad number refused
in words); a student's upload page says how many graded runs are left; the upload past the
assignment's number is refused with 429 and the quota's sentence; with the assignment's own
cleared, the course's number applies again."""
from __future__ import annotations

import html
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Course, Role
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.zips import random_zip
from tests.service.conftest import COURSE, auth
from tests.service.test_web_settings import PASSWORD, Browser


@pytest.fixture
def quota_settings(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Settings]:
    """No service-wide run quota, a one-hour window, no rate limit nor re-send window (each upload
    counts alone); hw4 and its course set none of their own afterwards."""
    yield settings.model_copy(update={"quota_runs": 0, "quota_window_s": 3600.0, "upload_rate_limit": 0,
                                      "upload_dedup_window_s": 0})
    with session_scope(sessions) as session:
        get_assignment(session, "hw4").quota_runs = None
        session.scalars(select(Course).where(Course.slug == COURSE)).one().quota_runs = None


def _people(sessions: sessionmaker[Session]) -> tuple[str, str, str]:
    """A new instructor and a new student of hw4's course: (instructor's login, student's login, student's token)."""
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        prof = get_or_create_user(session, f"rq-prof-{tag}", Role.instructor)
        student = get_or_create_user(session, f"rq-student-{tag}", Role.student)
        for user in (prof, student):
            set_password(user, PASSWORD, SUITE_ARGON2)
        return prof.username, student.username, issue_token(session, student, "quota")


def _post(browser: Browser, path: str, **data: str) -> str:
    answer = browser.client.post(path, data={"csrf_token": browser.page_csrf(), **data})
    return html.unescape(answer.text)


def _runs_left(browser: Browser) -> str:
    page = html.unescape(browser.client.get("/").text)
    start = page.index('id="runs-hw4">') + len('id="runs-hw4">')
    return page[start:page.index("</span>", start)]


def test_the_assignments_quota_refuses_past_its_number_and_the_page_says_what_is_left(
        quota_settings: Settings, sessions: sessionmaker[Session]) -> None:
    prof_name, student_name, token = _people(sessions)
    prof, student = Browser(quota_settings, prof_name), Browser(quota_settings, student_name)
    assert 'id="runs-hw4"' not in student.client.get("/").text  # no quota anywhere: nothing to count
    course_page = _post(prof, f"/courses/{COURSE}/quota", quota_runs="5")
    assert f"Now: 5 (course {COURSE}'s)." in course_page
    refused = prof.client.post("/assignments/hw4/quota", data={"csrf_token": prof.page_csrf(), "quota_runs": "lots"})
    assert refused.status_code == 400
    assert "Not saved: “lots” is not a number of runs" in html.unescape(refused.text)
    settings_page = _post(prof, "/assignments/hw4/quota", quota_runs="2")
    assert "Now: 2 graded runs per student in any 1 h (this assignment's own)." in settings_page
    assert f"empty: the default (course {COURSE}'s: 5)" in settings_page
    assert _runs_left(student) == "Graded runs: 2 of 2 runs left (a run counts for 1 h)."
    with TestClient(create_app(quota_settings)) as api:
        def upload():  # type: ignore[no-untyped-def]
            return api.post("/api/v1/submissions", headers=auth(token), files={"file": ("hw4.zip", random_zip(2048))})

        assert [upload().status_code for _ in range(2)] == [201, 201]
        assert _runs_left(student) == "Graded runs: 0 of 2 runs left (a run counts for 1 h)."
        third = upload()
        assert third.status_code == 429 and third.json()["error"]["code"] == "quota_exceeded"
        assert third.json()["error"]["message"].startswith(
            "quota reached: 2 graded runs of this assignment in 1 h; the next one is possible at ")
        cleared = _post(prof, "/assignments/hw4/quota", quota_runs="")
        assert f"Now: 5 graded runs per student in any 1 h (course {COURSE}'s)." in cleared
        assert _runs_left(student) == "Graded runs: 3 of 5 runs left (a run counts for 1 h)."
        assert upload().status_code == 201
