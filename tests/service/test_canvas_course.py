"""A course's grades as the one CSV Canvas imports (issue 30), on real PostgreSQL: exactly
Canvas's columns (Student, ID, SIS User ID, SIS Login ID, Section), a column per assignment of
the course named by its title, Canvas's Points Possible line with each assignment's points, a
row per student with each final grade (blank where there is none); the same file from the
course page and the API, for the course's staff (a TA included)."""
from __future__ import annotations

import csv
import io
import uuid

from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import enroll, get_or_create_user
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import Assignment, Course, CourseRole, GradeAdjustment, Role, RunState, utcnow
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_web_settings import PASSWORD, Browser


def test_a_course_csv_has_canvas_columns_and_every_assignment(settings: Settings,
                                                              sessions: sessionmaker[Session]) -> None:
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        course = Course(slug=f"canvas-{tag}", title="Canvas course")
        kernels = Assignment(slug=f"a-{tag}", title="HW1: kernels", total_points=50, course=course)
        model = Assignment(slug=f"b-{tag}", title="HW2, the model", total_points=100, course=course)
        session.add_all([kernels, model])
        session.flush()
        people = {}
        for who, part in (("ta", CourseRole.ta), ("ann", CourseRole.student), ("bob", CourseRole.student)):
            user = get_or_create_user(session, f"{who}-{tag}", Role.student, [])
            enroll(session, user, course, part)
            set_password(user, PASSWORD, SUITE_ARGON2)
            people[who] = user
        ann = entry_of(session, people["ann"].id, course.id)
        assert ann is not None
        ann.full_name, ann.section = "Lee, Ann", "A"
        for user, assignment, score in ((people["ann"], kernels, 41.5), (people["ann"], model, 90),
                                        (people["bob"], model, 70)):
            _, run = record_submission(session, user, assignment, "hw.zip", StoredBlob(uuid.uuid4().hex * 2, 10))
            run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
        session.add(GradeAdjustment(assignment_id=model.id, user_id=people["bob"].id, kind="adjust", points=4,
                                    reason="Late fix", by=people["ta"]))
        token = issue_token(session, people["ta"], "canvas")
        student_token = issue_token(session, people["ann"], "canvas")
    expected = [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "HW1: kernels", "HW2, the model"],
        ["    Points Possible", "", "", "", "", "50", "100"],
        ["Lee, Ann", "", "", f"ann-{tag}", "A", "41.5", "90"],
        [f"bob-{tag}", "", "", f"bob-{tag}", "", "", "74"],  # no run in HW1: blank keeps Canvas's value
    ]
    ta = Browser(settings, f"ta-{tag}")
    assert f'href="/courses/canvas-{tag}/gradebook.csv"' in ta.client.get(f"/courses/canvas-{tag}").text
    page = ta.client.get(f"/courses/canvas-{tag}/gradebook.csv")
    assert f'filename="canvas-{tag}-canvas.csv"' in page.headers["content-disposition"]
    assert list(csv.reader(io.StringIO(page.text))) == expected
    api = ta.client.get(f"/api/v1/courses/canvas-{tag}/gradebook.csv", headers=auth(token))
    assert api.status_code == 200 and list(csv.reader(io.StringIO(api.text))) == expected
    refused = ta.client.get(f"/api/v1/courses/canvas-{tag}/gradebook.csv", headers=auth(student_token))
    assert refused.status_code == 403
    assert ta.client.get("/api/v1/courses/no-such/gradebook.csv", headers=auth(token)).status_code == 404
