"""The role-by-route table of test_roles.py, across two courses that share a student and a TA
(issue 49): the instructor and the TA of one course send every staff route of it at the other
course (its assignment, its course page, its shared student's run, submission and open regrade
request) and reach nothing: a 403 or 404 page or API error, never the other course's data, and
nothing of it changes. The few routes that name no course (making a course, one's own roster
page, import and metrics) answer their caller's own things only.

Course A and course B each have an instructor, a TA of their own and an assignment; the student
`shared` is a student of both, with a scored run and an open regrade request in each, and
`shared_ta` is a TA of both."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.courses import create_course
from grader.course.membership import enroll, get_or_create_user
from grader.db import session_scope
from grader.models import (
    Assignment,
    CourseRole,
    ProblemResult,
    RegradeRequest,
    Role,
    Run,
    RunState,
    Submission,
    User,
    utcnow,
)
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import drop_queues
from tests.service.test_roles import STAFF_ROUTES, World
from tests.service.test_web_settings import PASSWORD, Browser

# Routes about no course: their caller's own (made courses, roster page and job, metrics)
NO_COURSE = {("POST", "/courses"), ("GET", "/roster"), ("GET", "/roster/job.json"), ("GET", "/api/v1/metrics")}
OTHER = {"a": "b", "b": "a"}


def _course(session: Session, key: str, tag: str, shared: dict[str, User], settings: Settings
            ) -> tuple[dict[str, User], dict[str, Any]]:
    """Course `key` with its instructor and own TA (returned), the shared people enrolled, and
    the shared student's scored run and open regrade request in its assignment (the World's ids)."""
    course = create_course(session, f"two-{key}-{tag}", f"Course {key} secret-{key}-{tag}")
    assignment = Assignment(slug=f"two-{key}-a-{tag}", title=f"Kernels secret-{key}-{tag}", total_points=100,
                            course=course, grading_paused=True)
    session.add(assignment)
    staff = {"instructor": get_or_create_user(session, f"two-{key}-prof-{tag}", Role.instructor, []),
             "ta": get_or_create_user(session, f"two-{key}-ta-{tag}", Role.student, [])}
    for user, part in ((staff["instructor"], CourseRole.instructor), (staff["ta"], CourseRole.ta),
                       (shared["student"], CourseRole.student), (shared["ta"], CourseRole.ta)):
        enroll(session, user, course, part)
    sub, run = record_submission(session, shared["student"], assignment, f"secret-{key}-{tag}.zip",
                                 StoredBlob(uuid.uuid4().hex * 2, 10))
    run.state, run.score, run.finished_at, run.message = RunState.scored, 60.0, utcnow(), f"secret-{key}-{tag}"
    run.results.append(ProblemResult(problem_id="1.1", title="Softmax", status="passed", points=60.0,
                                     max_points=100.0, message=f"secret-{key}-{tag}"))
    session.flush()
    session.add(RegradeRequest(run_id=run.id, student_id=shared["student"].id, reason=f"secret-{key}-{tag}"))
    return staff, {"slug": assignment.slug, "course": course.slug, "run": run.id, "submission": sub.id}


@pytest.fixture(scope="module")
def worlds(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[dict[str, World]]:
    """For each course, its World as the *other* course's staff see it: its paths and ids, the
    other course's instructor and TA as the browsers and tokens."""
    tag = uuid.uuid4().hex[:6]
    own = settings.model_copy(update={"task_queue": f"kg-two-{tag}", "similarity_queue": f"kg-two-sim-{tag}"})
    with session_scope(sessions) as session:
        shared = {"student": get_or_create_user(session, f"two-shared-{tag}", Role.student, []),
                  "ta": get_or_create_user(session, f"two-shared-ta-{tag}", Role.student, [])}
        made = {key: _course(session, key, tag, shared, own) for key in ("a", "b")}
        users = [*shared.values(), *(u for staff, _ in made.values() for u in staff.values())]
        for user in users:
            set_password(user, PASSWORD, SUITE_ARGON2)
        tokens = {key: {part: issue_token(session, user, "two") for part, user in staff.items()}
                  for key, (staff, _) in made.items()}
        logins = {key: {part: user.username for part, user in staff.items()} for key, (staff, _) in made.items()}
        shared_login, shared_id = shared["student"].username, shared["student"].id
    browsers = {key: {part: Browser(own, login) for part, login in parts.items()} for key, parts in logins.items()}
    api = TestClient(create_app(own))
    yield {key: World(ids["slug"], ids["course"], {**logins[OTHER[key]], "student": shared_login},
                      tokens[OTHER[key]], ids["run"], ids["submission"], shared_id, sessions, own, browsers[OTHER[key]], api)
           for key, (_, ids) in made.items()}
    drop_queues(own.task_queue, own.similarity_queue)


def _state(w: World) -> tuple[object, ...]:
    """What a staff route could change in the course of `w`: its assignment's settings and
    pause, its runs, its requests' states, its members."""
    with session_scope(w.sessions) as session:
        assignment = session.scalars(select(Assignment).where(Assignment.slug == w.slug)).one()
        runs = session.scalar(select(func.count(Run.id)).join(Submission).where(
            Submission.assignment_id == assignment.id)) or 0
        requests = sorted(session.execute(select(RegradeRequest.id, RegradeRequest.state).join(
            Run, Run.id == RegradeRequest.run_id).where(Run.id == w.run)).all())
        return (assignment.due_at, assignment.score_policy, assignment.grading_paused, assignment.similarity_base,
                assignment.course_id, runs, requests)


@pytest.mark.parametrize("target", ["a", "b"])
@pytest.mark.parametrize("role", ["instructor", "ta"])
@pytest.mark.parametrize("route", sorted(STAFF_ROUTES), ids=" ".join)
def test_staff_of_one_course_reach_nothing_of_the_other(route: tuple[str, str], role: str, target: str,
                                                         worlds: dict[str, World]) -> None:
    w = worlds[target]
    w.request  # noqa: B018 (the shared student's open request in the target course, made again if answered)
    before = _state(w)
    response = STAFF_ROUTES[route].send(w, role)
    secret = f"secret-{target}-"
    assert secret not in response.text, (route, role, response.status_code, response.text[:400])
    if route not in NO_COURSE:
        assert response.status_code in (403, 404), (route, role, response.status_code, response.text[:400])
    assert _state(w) == before, (route, role, "changed the other course")
