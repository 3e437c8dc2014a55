"""Staff workflow (issue 18) on real PostgreSQL, through the web forms: a staff adjustment of a
run with its reason is in the one final grade everywhere (run page, history, gradebook page,
its CSV, the JSON API); regrade requests are the run's student's alone, one open at a time,
answered by a re-grade (a new run), an adjustment or a reply, which the student then sees;
comments on a run by its student and the staff, and by no other student."""
from __future__ import annotations

import csv
import io
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, GradeAdjustment, RegradeRequest, Role, Run, RunState, User, utcnow
from grader.models import Course as CourseRow
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, drop_queues
from tests.service.test_web_settings import PASSWORD, Browser

REASON = "The softmax kernel was checked by hand"


@dataclass
class Course:
    slug: str
    prof: str
    student: str
    other: str
    settings: Settings


@pytest.fixture(scope="module")
def course(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Course]:
    tag = uuid.uuid4().hex[:6]
    slug = f"flow-{tag}"
    with session_scope(sessions) as session:
        session.add(Assignment(slug=slug, title=f"Flow {tag}", course=CourseRow(slug=slug, title=f"Flow {tag}"), total_points=100))
        session.flush()  # created first: new accounts join every assignment there is
        users = [get_or_create_user(session, f"flow-{who}-{tag}", role)
                 for who, role in (("prof", Role.instructor), ("stu", Role.student), ("oth", Role.student))]
        for user in users:
            set_password(user, PASSWORD, SUITE_ARGON2)
        names = [u.username for u in users]
    own = settings.model_copy(update={"task_queue": f"kg-flow-{tag}"})
    yield Course(slug, *names, own)
    drop_queues(own.task_queue)


def scored_run(sessions: sessionmaker[Session], course: Course, score: float = 60.0) -> int:
    """A scored run of the student (as the worker records one; no worker reads this queue)."""
    with session_scope(sessions) as session:
        student = get_or_create_user(session, course.student, Role.student)
        assignment = session.scalars(select(Assignment).where(Assignment.slug == course.slug)).one()
        blob = StoredBlob(sha256=uuid.uuid4().hex * 2, size=10)
        _, run = record_submission(session, student, assignment, "hw.zip", blob)
        run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
        return run.id


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def post_form(browser: Browser, page: str, to: str, **fields: str) -> int:
    """The status of `browser`'s POST of `fields` to `to`, with the CSRF token of its `page`."""
    sent = browser.client.post(to, data={"csrf_token": browser.page_csrf(page), **fields},
                               follow_redirects=False)
    return sent.status_code


def test_an_adjustment_with_its_reason_is_in_the_grade_everywhere(course: Course,
                                                                  sessions: sessionmaker[Session]) -> None:
    run_id = scored_run(sessions, course)
    student, prof = Browser(course.settings, course.student), Browser(course.settings, course.prof)
    assert post_form(student, f"/runs/{run_id}", f"/runs/{run_id}/adjustments", points="5", reason="mine") == 403
    assert post_form(prof, f"/runs/{run_id}", f"/runs/{run_id}/adjustments", points="abc", reason=REASON) == 400
    assert post_form(prof, f"/runs/{run_id}", f"/runs/{run_id}/adjustments", points="7.5", reason=REASON) == 303
    assert post_form(prof, f"/runs/{run_id}", f"/runs/{run_id}/adjustments", points="-2.5", reason="Late fix") == 303

    run_page = student.client.get(f"/runs/{run_id}").text
    assert 'id="run-score">65</strong> / 100' in run_page
    run_text = text_of(run_page)
    assert f"Adjusted by staff: +7.5 ({REASON}); -2.5 (Late fix), so 65 of 100 points." in run_text
    assert f"+7.5 points by {course.prof}" in run_text and REASON in run_text  # the history, who and when
    assert 'id="adjustment-form"' not in run_page and 'id="adjustment-form"' in prof.client.get(f"/runs/{run_id}").text

    history = text_of(student.client.get("/submissions").text)
    assert f"65 points (adjusted +5: {REASON}; Late fix)" in history

    book = prof.client.get("/gradebook", params={"assignment": course.slug}).text
    row = re.search(rf'<th scope="row">{course.student}</th>(.*?)</tr>', book, re.DOTALL)
    assert row and 'class="final-grade">65</span>' in row.group(1) and REASON in row.group(1)

    exported = prof.client.get("/gradebook-detailed.csv", params={"assignment": course.slug}).text
    line = next(r for r in csv.DictReader(io.StringIO(exported)) if r["SIS Login ID"] == course.student)
    assert line[f"Flow {course.slug.removeprefix('flow-')} final (100)"] == "65"
    assert line["Adjustment (points)"] == "5" and line["Adjustment reasons"] == f"{REASON} (+7.5); Late fix (-2.5)"
    assert line["Raw score before late penalty (100)"] == "60" and REASON in line["Grade reason"]

    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, course.prof, Role.instructor), "flow")
    grade = prof.client.get(f"/api/v1/runs/{run_id}", headers=auth(token)).json()["grade"]
    assert (grade["final_score"], grade["raw_score"], grade["adjustment"]) == (65, 60, 5)
    assert [(a["points"], a["reason"], a["by"]) for a in grade["adjustments"]] == [
        (7.5, REASON, course.prof), (-2.5, "Late fix", course.prof)]
    book_json = prof.client.get(f"/api/v1/assignments/{course.slug}/gradebook", headers=auth(token)).json()
    assert next(r for r in book_json["rows"] if r["user"] == course.student)["grade"] == grade


def test_a_regrade_request_is_the_students_own_and_one_at_a_time(course: Course,
                                                                 sessions: sessionmaker[Session]) -> None:
    run_id = scored_run(sessions, course)
    student, other = Browser(course.settings, course.student), Browser(course.settings, course.other)
    prof = Browser(course.settings, course.prof)
    ask = f"/runs/{run_id}/regrade-request"
    assert post_form(other, "/", ask, reason="Not mine") == 404
    assert post_form(prof, "/", ask, reason="Not a student's") == 404
    assert post_form(student, f"/runs/{run_id}", ask, reason="  ") == 400
    assert post_form(student, f"/runs/{run_id}", ask, reason="Problem 3 timed out on a busy GPU") == 303
    assert post_form(student, "/", ask, reason="Again") == 400  # one open request per run
    page = student.client.get(f"/runs/{run_id}").text
    assert "open, waiting for the staff" in page and 'id="regrade-request-form"' not in page

    queue = f"/assignments/{course.slug}/regrade-requests"
    assert other.client.get(queue).status_code == 403  # a student of the course
    with session_scope(sessions) as session:
        request_id = session.scalars(select(RegradeRequest.id).where(RegradeRequest.run_id == run_id)).one()
    listed = prof.client.get(queue).text
    assert f'id="request-{request_id}"' in listed and "Problem 3 timed out on a busy GPU" in listed
    decide = f"{queue}/{request_id}"
    assert post_form(other, "/", decide, action="reject", reply="no") == 403
    assert post_form(prof, queue, decide, action="reject", reply="") == 400  # a rejection says why
    assert post_form(prof, queue, decide, action="regrade", reply="Grading it again") == 303
    assert post_form(prof, queue, decide, action="reject", reply="Changed my mind") == 400  # decided once

    with session_scope(sessions) as session:
        asked = session.get_one(RegradeRequest, request_id)
        assert asked.state == "accepted" and asked.regrade_run_id is not None
        new_run = session.get_one(Run, asked.regrade_run_id)
        assert (new_run.reason, new_run.submission_id) == ("regrade", session.get_one(Run, run_id).submission_id)
    page = text_of(student.client.get(f"/runs/{run_id}").text)
    assert f"Reply from {course.prof}: Grading it again (re-graded as run {asked.regrade_run_id} )" in page
    assert post_form(student, f"/runs/{run_id}", ask, reason="Still wrong") == 303  # a new one may be opened


def test_requests_are_rejected_with_a_reply_or_accepted_with_an_adjustment(course: Course,
                                                                         sessions: sessionmaker[Session]) -> None:
    student, prof = Browser(course.settings, course.student), Browser(course.settings, course.prof)
    queue = f"/assignments/{course.slug}/regrade-requests"
    decided, entries = [], _entry_sum(sessions, course)  # the student's grade carries the earlier tests' entries
    for action, fields in (("reject", {"reply": "The timing is within the noise"}),
                           ("adjust", {"reply": "Problem 2 deserved the points", "points": "4"})):
        run_id = scored_run(sessions, course, 50.0)
        assert post_form(student, f"/runs/{run_id}", f"/runs/{run_id}/regrade-request", reason="Please") == 303
        with session_scope(sessions) as session:
            request_id = session.scalars(select(RegradeRequest.id).where(RegradeRequest.run_id == run_id)).one()
        assert post_form(prof, queue, f"{queue}/{request_id}", action=action, **fields) == 303
        decided.append((run_id, fields["reply"]))
    (rejected, no), (adjusted, yes) = decided
    page = student.client.get(f"/runs/{rejected}").text
    assert f"Reply from {course.prof}: {no}" in text_of(page) and 'id="run-score">50</strong>' in page
    page = student.client.get(f"/runs/{adjusted}").text
    assert f'id="run-score">{50 + entries + 4:g}</strong>' in page and f"+4 ({yes})" in text_of(page)
    with session_scope(sessions) as session:
        assert session.scalars(select(GradeAdjustment.reason).where(GradeAdjustment.run_id == adjusted)).all() == [yes]


def _entry_sum(sessions: sessionmaker[Session], course: Course) -> float:
    with session_scope(sessions) as session:
        return sum(session.scalars(select(GradeAdjustment.points).join(User, User.id == GradeAdjustment.user_id)
                                   .where(User.username == course.student, GradeAdjustment.points.is_not(None))))


def test_the_student_and_the_staff_comment_on_a_run(course: Course, sessions: sessionmaker[Session]) -> None:
    run_id = scored_run(sessions, course)
    student, other = Browser(course.settings, course.student), Browser(course.settings, course.other)
    prof = Browser(course.settings, course.prof)
    to = f"/runs/{run_id}/comments"
    assert post_form(other, "/", to, body="Nice run") == 404
    assert post_form(student, f"/runs/{run_id}", to, body=" ") == 400
    assert post_form(student, f"/runs/{run_id}", to, body="Why did problem 2 lose points?") == 303
    assert post_form(prof, f"/runs/{run_id}", to, body="The backward pass is checked at fp32") == 303
    for browser in (student, prof):
        shown = text_of(browser.client.get(f"/runs/{run_id}").text)
        assert re.search(rf"{course.student}, [\d-]+ [\d:]+ UTC: Why did problem 2 lose points\? "
                         rf"{course.prof} \(staff\), [\d-]+ [\d:]+ UTC: The backward pass is checked at fp32", shown)


def test_the_database_holds_one_open_request_per_run(course: Course, sessions: sessionmaker[Session]) -> None:
    """Two requests sent at the same moment both pass the page's check: the migration's partial
    unique index keeps one (a decided request does not count)."""
    run_id = scored_run(sessions, course)
    with session_scope(sessions) as session:
        student_id = get_or_create_user(session, course.student, Role.student).id
        session.add(RegradeRequest(run_id=run_id, student_id=student_id, reason="first", state="rejected"))
        session.add(RegradeRequest(run_id=run_id, student_id=student_id, reason="second"))
    with pytest.raises(IntegrityError), session_scope(sessions) as session:
        session.add(RegradeRequest(run_id=run_id, student_id=student_id, reason="third"))
