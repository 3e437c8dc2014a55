"""A course's TA powers and run quotas through /api/v1 (issue 51; real PostgreSQL and Redis):
its staff read them, only its instructors change them (a TA or student 403 with who may, someone
outside the course and an unknown course or assignment 404, a token without `manage` 403); a
value the pages refuse is refused the same way (400); each change is the audit row the pages
write, via api; and a student's uploads meet the quota set through the API."""
from __future__ import annotations

import html
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import SCOPE_READ, SCOPE_READ_ALL, SCOPE_REGRADE, SCOPE_SUBMIT, issue_token
from grader.course.membership import enroll, get_or_create_user
from grader.db import session_scope
from grader.models import AuditEvent, Course, CourseRole, Role
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.zips import random_zip
from tests.service.conftest import COURSE, auth, drop_queues
from tests.service.test_web_settings import PASSWORD, Browser


@pytest.fixture
def quota_settings(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Settings]:
    """No service-wide quota, a one-hour window, no rate limit nor re-send window, a queue of its
    own; hw4 and its course set no quota and give their TAs nothing afterwards."""
    own = settings.model_copy(update={"quota_runs": 0, "quota_window_s": 3600.0, "upload_rate_limit": 0,
                                      "upload_dedup_window_s": 0,
                                      "task_queue": f"kg-test-staffset-{uuid.uuid4().hex[:8]}"})
    yield own
    drop_queues(own.task_queue)
    with session_scope(sessions) as session:
        get_assignment(session, "hw4").quota_runs = None
        course = session.scalars(select(Course).where(Course.slug == COURSE)).one()
        course.quota_runs, course.ta_powers = None, ""


@pytest.fixture
def people(sessions: sessionmaker[Session]) -> dict[str, Any]:
    """Tokens of a new instructor, TA and student of hw4's course, of someone in no course, and of
    the instructor without the `manage` scope; the instructor's login (with a web password)."""
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        course = session.scalars(select(Course).where(Course.slug == COURSE)).one()
        prof = get_or_create_user(session, f"ss-prof-{tag}", Role.instructor, [course])
        set_password(prof, PASSWORD, SUITE_ARGON2)
        ta = get_or_create_user(session, f"ss-ta-{tag}", Role.student, [])
        enroll(session, ta, course, CourseRole.ta)
        student = get_or_create_user(session, f"ss-student-{tag}", Role.student, [course])
        outsider = get_or_create_user(session, f"ss-out-{tag}", Role.instructor, [])
        return {"prof_login": prof.username, "prof": issue_token(session, prof, "t"),
                "old": issue_token(session, prof, "old", (SCOPE_SUBMIT, SCOPE_READ, SCOPE_READ_ALL, SCOPE_REGRADE)),
                "ta": issue_token(session, ta, "t"), "student": issue_token(session, student, "t"),
                "outsider": issue_token(session, outsider, "t")}


def _audit(sessions: sessionmaker[Session], detail: str) -> list[tuple[str, str]]:
    """(via, actor's login) of each settings_changed row with this detail."""
    with session_scope(sessions) as session:
        rows = session.scalars(select(AuditEvent).where(AuditEvent.event == "settings_changed",
                                                        AuditEvent.detail == detail)).all()
        return [(row.via, row.login or "") for row in rows]


def test_ta_powers_are_read_by_staff_and_changed_by_instructors_only(
        quota_settings: Settings, sessions: sessionmaker[Session], people: dict[str, Any]) -> None:
    path = f"/api/v1/courses/{COURSE}/ta-powers"
    with TestClient(create_app(quota_settings)) as api:
        seen = api.get(path, headers=auth(people["ta"]))
        assert seen.status_code == 200 and seen.json()["granted"] == []
        assert set(seen.json()["grantable"]) == {"extend", "queue", "schedule"}
        for who, why in (("ta", "you are a TA there"), ("student", "you are a student there")):
            refused = api.put(path, headers=auth(people[who]), json={"granted": ["queue"]})
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden", refused.text
            assert refused.json()["error"]["message"] == (
                f"Only the course's instructors change its policies, quotas, roster or members, or remove anything "
                f"in {COURSE}; {why}.")
        assert api.get(path, headers=auth(people["student"])).status_code == 403
        assert api.put(path, headers=auth(people["outsider"]), json={"granted": []}).status_code == 404
        assert api.put("/api/v1/courses/no-such-course/ta-powers", headers=auth(people["prof"]),
                       json={"granted": []}).status_code == 404
        old = api.put(path, headers=auth(people["old"]), json={"granted": ["queue"]})
        assert old.status_code == 403 and old.json()["error"]["message"] == "this token lacks the 'manage' scope"
        wrong = api.put(path, headers=auth(people["prof"]), json={"granted": ["queue", "manage"]})
        assert wrong.status_code == 400 and "“manage” is not a power a course gives its TAs" in wrong.text
        assert api.get(path, headers=auth(people["ta"])).json()["granted"] == []  # nothing was changed
        done = api.put(path, headers=auth(people["prof"]), json={"granted": ["queue", "extend"]})
        assert done.status_code == 200 and done.json()["granted"] == ["extend", "queue"]
        assert api.get(path, headers=auth(people["ta"])).json()["granted"] == ["extend", "queue"]
        # Stored as the pages store it (grader.roles.powers_text).
        with session_scope(sessions) as session:
            assert session.scalars(select(Course).where(Course.slug == COURSE)).one().ta_powers == "extend,queue"
    assert _audit(sessions, f"course {COURSE}: TA powers none -> extend, queue") == [("api", people["prof_login"])]


def test_the_course_page_writes_the_same_audit_row(
        quota_settings: Settings, sessions: sessionmaker[Session], people: dict[str, Any]) -> None:
    prof = Browser(quota_settings, people["prof_login"])
    answer = prof.client.post(f"/courses/{COURSE}/ta-powers", follow_redirects=False,
                              data={"csrf_token": prof.page_csrf(f"/courses/{COURSE}"), "schedule": "on"})
    assert answer.status_code == 303
    assert _audit(sessions, f"course {COURSE}: TA powers none -> schedule") == [("web", people["prof_login"])]


def test_a_quota_set_through_the_api_meets_the_students_uploads(
        quota_settings: Settings, sessions: sessionmaker[Session], people: dict[str, Any]) -> None:
    course_path, own_path = f"/api/v1/courses/{COURSE}/quota", "/api/v1/assignments/hw4/quota"
    with TestClient(create_app(quota_settings)) as api:
        def upload() -> Any:
            return api.post("/api/v1/submissions", headers=auth(people["student"]),
                            files={"file": ("hw4.zip", random_zip(2048))})

        def put(path: str, runs: Any, who: str = "prof") -> Any:
            return api.put(path, headers=auth(people[who]), json={"runs": runs})

        assert api.get(own_path, headers=auth(people["ta"])).json() == {
            "course": COURSE, "assignment": "hw4", "runs": None, "in_force": 0, "source": "the service's default",
            "window_s": 3600.0}
        for who in ("ta", "student"):
            refused = put(own_path, 1, who)
            assert refused.status_code == 403 and "Only the course's instructors change" in refused.text
            assert put(course_path, 1, who).status_code == 403
        assert put("/api/v1/assignments/no-such-hw/quota", 1).status_code == 404
        assert put(own_path, 1, "outsider").status_code == 404
        bad = put(own_path, -1)
        assert bad.status_code == 400 and "“-1” is not a number of runs" in bad.json()["error"]["message"]
        assert put(own_path, None, "prof").json()["runs"] is None and put(own_path, "x").status_code == 422

        assert put(course_path, 3).json() == {"course": COURSE, "assignment": None, "runs": 3, "in_force": 3,
                                              "source": f"course {COURSE}'s", "window_s": 3600.0}
        own = put(own_path, 1).json()
        assert (own["runs"], own["in_force"], own["source"]) == (1, 1, "this assignment's own")
        assert upload().status_code == 201
        second = upload()
        assert second.status_code == 429 and second.json()["error"]["code"] == "quota_exceeded"
        assert second.json()["error"]["message"].startswith("quota reached: 1 graded runs of this assignment in 1 h")
        cleared = put(own_path, None).json()
        assert (cleared["runs"], cleared["in_force"], cleared["source"]) == (None, 3, f"course {COURSE}'s")
        assert upload().status_code == 201
    # The student's upload page counts the same quota.
    with session_scope(sessions) as session:
        student = get_or_create_user(session, f"ss-page-{uuid.uuid4().hex[:6]}", Role.student)
        set_password(student, PASSWORD, SUITE_ARGON2)
        name = student.username
    page = html.unescape(Browser(quota_settings, name).client.get("/").text)
    assert "Graded runs: 3 of 3 runs left (a run counts for 1 h)." in page
    assert _audit(sessions, "assignment hw4: run quota default -> 1") == [("api", people["prof_login"])]
    assert _audit(sessions, "assignment hw4: run quota 1 -> default") == [("api", people["prof_login"])]
