"""Uploads through the API obey the assignment's schedule and the run quota (real PostgreSQL):
a student is refused before the release and after the late window with the policy's reason,
staff are not; the quota's N+1-th upload is refused with Retry-After; a refused upload
records nothing."""
from __future__ import annotations

import io
import uuid
import zipfile
from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.deadlines import LatePolicy
from grader.course.membership import get_or_create_user
from grader.course.policies import set_schedule
from grader.db import session_scope
from grader.models import Role, Submission, utcnow
from grader.settings import Settings
from tests.service.conftest import auth


def fresh_zip() -> bytes:
    """A zip of its own each time: the same bytes again within the re-send window would be
    answered with the earlier submission, not counted as another upload."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("llmsys_hw4/README.md", f"admission test {uuid.uuid4().hex}")
    return buf.getvalue()


def upload(client: TestClient, token: str):  # type: ignore[no-untyped-def]
    return client.post("/api/v1/submissions", headers=auth(token),
                       files={"file": ("llmsys_hw4.zip", fresh_zip(), "application/zip")})


def submissions(sessions: sessionmaker[Session]) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count()).select_from(Submission)) or 0)


def new_user(sessions: sessionmaker[Session], role: Role) -> str:
    with session_scope(sessions) as session:
        return issue_token(session, get_or_create_user(session, f"adm-{uuid.uuid4().hex[:8]}", role), "test")


def test_schedule_refuses_students_outside_it_and_lets_staff_through(
        client: TestClient, sessions: sessionmaker[Session]) -> None:
    student, staff = new_user(sessions, Role.student), new_user(sessions, Role.instructor)
    now = utcnow()
    schedules = {
        "not_released": LatePolicy(release_at=now + timedelta(days=1), due_at=now + timedelta(days=8)),
        "closed": LatePolicy(due_at=now - timedelta(days=3), grace=timedelta(hours=1), late_window=timedelta(days=2)),
    }
    try:
        for code, policy in schedules.items():
            with session_scope(sessions) as session:
                set_schedule(session, "hw4", policy, "latest")
            before = submissions(sessions)
            refused = upload(client, student)
            assert refused.status_code == 403, refused.text
            assert refused.json()["error"]["code"] == code, refused.json()
            assert submissions(sessions) == before  # nothing recorded for a refused upload
            assert upload(client, staff).status_code == 201  # staff test the assignment any time
        with session_scope(sessions) as session:  # inside the late window: taken (the penalty is the gradebook's)
            set_schedule(session, "hw4", LatePolicy(due_at=now - timedelta(hours=2), late_window=timedelta(days=1),
                                                    penalty_per_day=0.1), "latest")
        assert upload(client, student).status_code == 201
    finally:
        with session_scope(sessions) as session:
            set_schedule(session, "hw4", LatePolicy(), "latest")


def test_quota_refuses_the_next_upload_with_retry_after(settings: Settings, sessions: sessionmaker[Session]) -> None:
    student, staff = new_user(sessions, Role.student), new_user(sessions, Role.instructor)
    limited = settings.model_copy(update={"quota_runs": 2, "quota_window_s": 3600.0})
    with TestClient(create_app(limited)) as client:
        assert [upload(client, student).status_code for _ in range(2)] == [201, 201]
        before = submissions(sessions)
        refused = upload(client, student)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "quota_exceeded"
        assert 3500 <= int(refused.headers["Retry-After"]) <= 3600
        assert submissions(sessions) == before
        assert [upload(client, staff).status_code for _ in range(3)] == [201, 201, 201]  # staff are exempt
