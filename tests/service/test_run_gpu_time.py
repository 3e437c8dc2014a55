"""The run page's GPU time by phase: shown to the course's staff, never to the student, from the
run's stored measurements (the table's figures: tests/unit/rubrics/hw4/test_gpu_time.py)."""
from __future__ import annotations

import uuid

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ProblemResult, Role, RunState, User, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_web_settings import PASSWORD, Browser
from tests.unit.rubrics.hw4.test_gpu_time import record


def scored_run_with_phases(session: Session, student: User) -> int:
    """A scored hw4 run of `student` whose measurements recorded their phases (the unit test's record)."""
    _sub, run = record_submission(session, student, get_assignment(session, "hw4"), "a.zip",
                                  StoredBlob(sha256="9a" * 32, size=1))
    run.state, run.score, run.started_at, run.finished_at = RunState.scored, 50.0, utcnow(), utcnow()
    for pid, measurement in record().items():
        run.results.append(ProblemResult(problem_id=pid, title=pid, status="passed", points=10, max_points=10,
                                         details={"measurement": measurement}))
    session.flush()
    return run.id


def test_staff_see_the_gpu_time_by_phase_and_the_student_does_not(
    settings: Settings, sessions: sessionmaker[Session], client: TestClient,
) -> None:
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        student = get_or_create_user(session, f"gstu-{tag}", Role.student)
        prof = get_or_create_user(session, f"gprof-{tag}", Role.instructor)
        for user in (student, prof):
            set_password(user, PASSWORD, SUITE_ARGON2)
        run_id = scored_run_with_phases(session, student)
        tokens = {name: issue_token(session, user, "test") for name, user in (("student", student), ("prof", prof))}

    staff_page = Browser(settings, f"gprof-{tag}").client.get(f"/runs/{run_id}").text
    assert 'id="gpu-time"' in staff_page and "180.0 s in the GPU stage of its 300 s budget" in staff_page
    assert "checks, profiles and warm-ups of all problems, at once" in staff_page and "<td>25.0</td>" in staff_page
    student_page = Browser(settings, f"gstu-{tag}").client.get(f"/runs/{run_id}")
    assert student_page.status_code == 200 and "gpu-time" not in student_page.text
    assert "GPU time by phase" not in student_page.text

    staff = client.get(f"/api/v1/runs/{run_id}", headers=auth(tokens["prof"])).json()
    own = client.get(f"/api/v1/runs/{run_id}", headers=auth(tokens["student"])).json()
    assert staff["gpu_time"]["stage_s"] == 180.0 and own["gpu_time"] is None
    at_once = next(r for r in staff["gpu_time"]["rows"] if r["phase"].startswith("checks, profiles"))
    assert at_once["run_s"] == 25.0 and at_once["seconds"] == {}
