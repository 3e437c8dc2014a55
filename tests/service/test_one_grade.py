"""One grade everywhere (issue 18), on real PostgreSQL: a late upload through the web form,
scored, shows the same final grade, raw score, penalty and reason (in the course's time zone)
on the run page, the history, the gradebook page, its CSV, the JSON API and the e-mail
notice; the upload page shows the deadlines and, once the late window has closed, a form
replaced by the reason the upload POST gives."""
from __future__ import annotations

import csv
import io
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.deadlines import LatePolicy
from grader.course.membership import get_or_create_user
from grader.course.policies import set_schedule
from grader.db import session_scope
from grader.models import Assignment, Course, Enrollment, ProblemResult, Role, Run, RunState, utcnow
from grader.notify import body, run_notice
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, drop_queues
from tests.service.test_web_ops import minimal_zip
from tests.service.test_web_settings import PASSWORD, Browser

ZONE = "America/New_York"
RAW = (20.0, 20.0, 20.0, 20.0, 16.75)  # 96.75
# Due 1 d 2 h ago with a 1 h grace: 1 d 1 h past the grace is 2 started days, 20% off.
FINAL, PENALTY = "77.4", "19.35"


@dataclass
class LateCourse:
    slug: str
    prof: str
    student: str
    settings: Settings


@pytest.fixture(scope="module")
def late_course(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[LateCourse]:
    tag = uuid.uuid4().hex[:6]
    slug = f"late-{tag}"
    with session_scope(sessions) as session:
        session.add(Assignment(slug=slug, title=f"Late {tag}", course=Course(slug=slug, title=f"Late {tag}"), total_points=100))
        session.flush()  # created first: new accounts join every assignment there is
        prof = get_or_create_user(session, f"late-prof-{tag}", Role.instructor)
        student = get_or_create_user(session, f"late-stu-{tag}", Role.student)
        for user in (prof, student):
            set_password(user, PASSWORD, SUITE_ARGON2)
        names = prof.username, student.username
    own = settings.model_copy(update={"task_queue": f"kg-late-{tag}", "course_timezone": ZONE})
    yield LateCourse(slug, *names, own)
    drop_queues(own.task_queue)


def _schedule(sessions: sessionmaker[Session], slug: str, due_ago: timedelta) -> None:
    with session_scope(sessions) as session:
        set_schedule(session, slug, LatePolicy(due_at=utcnow() - due_ago, grace=timedelta(hours=1),
                                               late_window=timedelta(days=5), penalty_per_day=0.1), "latest")


def _score(sessions: sessionmaker[Session], run_id: int) -> None:
    """Finish the run as the worker records a score (no worker reads this course's queue)."""
    with session_scope(sessions) as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.state, run.score, run.finished_at = RunState.scored, sum(RAW), utcnow()
        run.results = [ProblemResult(problem_id=f"p{i}", title=f"Problem {i}", status="passed", points=p,
                                     max_points=20.0) for i, p in enumerate(RAW, 1)]


def _found(pattern: str, html: str) -> str:
    """The first group of `pattern` in `html` (across lines); the test fails without one."""
    match = re.search(pattern, html, re.DOTALL)
    assert match, f"{pattern!r} is not on the page: {_text(html)}"
    return match.group(1)


def _text(html: str) -> str:
    """The page's text, tags taken out and spaces squeezed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_late_upload_has_one_grade_everywhere(late_course: LateCourse, sessions: sessionmaker[Session]) -> None:
    _schedule(sessions, late_course.slug, timedelta(days=1, hours=2))
    student, prof = Browser(late_course.settings, late_course.student), Browser(late_course.settings, late_course.prof)
    upload_page = _text(_found(rf'id="deadline-{late_course.slug}">(.*?)</li>', student.client.get("/").text))
    assert "due" in upload_page and "Grace period until" in upload_page
    assert "10% off per started day" in upload_page and "until the late window closes" in upload_page
    assert "An upload now is late: 20% off." in upload_page
    assert re.search(r"E[SD]T", upload_page)  # in the course's zone, not UTC
    token = student.page_csrf("/")
    sent = student.client.post("/submit", data={"csrf_token": token, "assignment": late_course.slug},
                               files={"file": ("hw.zip", minimal_zip(), "application/zip")}, follow_redirects=False)
    assert sent.status_code == 303, sent.text
    run_id = int(sent.headers["location"].rsplit("/", 1)[1])
    _score(sessions, run_id)

    run_page = student.client.get(f"/runs/{run_id}").text
    assert re.search(rf'id="run-score">{FINAL}</strong> / 100', run_page), _text(run_page)
    run_text = _text(run_page)
    assert "Late" in _found(r'class="score">(.*?)</p>', run_page)
    assert f"Raw score 96.75, late penalty {PENALTY} points." in run_text
    reason = _found(r'id="run-grade-reason">(.*?)</p>', run_page).split("points. ", 1)[1]
    assert "2 started day(s)" in reason and re.search(r"E[SD]T", reason) and f"= {FINAL} of 100" in reason

    history = student.client.get("/submissions").text
    assert re.search(rf'class="run-grade">{FINAL} points</span> <span class="flag late-badge">Late</span>', history)
    assert f"raw 96.75, late penalty {PENALTY}" in history and 'class="counts">counts' in history
    assert f'run {run_id}</a>, {FINAL} / 100' in history and "newest submission that has a scored run" in history

    book = prof.client.get("/gradebook", params={"assignment": late_course.slug}).text
    row = _found(rf'<th scope="row">{late_course.student}</th>(.*?)</tr>', book)
    assert f'class="final-grade">{FINAL}</span>' in row and "late-badge" in row and reason in row

    exported = prof.client.get("/gradebook-detailed.csv", params={"assignment": late_course.slug}).text
    table = list(csv.DictReader(io.StringIO(exported)))
    line = next(r for r in table if r["SIS Login ID"] == late_course.student)
    assert line[f"Late {late_course.slug.removeprefix('late-')} final (100)"] == FINAL
    assert line["Raw score before late penalty (100)"] == "96.75" and line["Late penalty (points)"] == PENALTY
    assert line["Lateness"] == "late" and line["Late days charged"] == "2"
    assert line["Grade reason"].endswith(reason)
    assert [line[f"p{i} Problem {i} raw (20)"] for i in (1, 5)] == ["20", "16.75"]

    with session_scope(sessions) as session:
        api_token = issue_token(session, get_or_create_user(session, late_course.prof, Role.instructor), "test")
    run_json = prof.client.get(f"/api/v1/runs/{run_id}", headers=auth(api_token)).json()
    assert run_json["score"] == 96.75  # unchanged: the run's own (raw) score
    grade = run_json["grade"]
    assert (grade["final_score"], grade["raw_score"], grade["penalty"]) == (77.4, 96.75, 19.35)
    assert grade["lateness"] == "late" and grade["late"] and grade["penalty_days"] == 2
    book_json = prof.client.get(f"/api/v1/assignments/{late_course.slug}/gradebook", headers=auth(api_token)).json()
    row_json = next(r for r in book_json["rows"] if r["user"] == late_course.student)
    assert row_json["total"] == 77.4 and row_json["latest"]["grade"]["final_score"] == 77.4
    assert row_json["grade"] == grade and re.search(r"E[SD]T", grade["reason"])  # the reason too, in the zone
    api_csv = prof.client.get(f"/api/v1/assignments/{late_course.slug}/gradebook-detailed.csv", headers=auth(api_token)).text
    api_line = next(r for r in csv.DictReader(io.StringIO(api_csv)) if r["SIS Login ID"] == late_course.student)
    assert api_line == line  # the API's CSV is the gradebook page's, reason included

    with session_scope(sessions) as session:  # the e-mail notice
        run = session.get_one(Run, run_id)
        run.submission.user.email = f"{late_course.student}@example.edu"
        session.flush()
        notice = run_notice(session, run, late_course.settings)
        assert notice is not None
        text = body(notice)
    assert f"Grade: {FINAL} / 100\nBefore the late penalty: 96.75\n" in text and reason in text


def test_staff_pages_show_instants_in_the_course_zone(late_course: LateCourse,
                                                     sessions: sessionmaker[Session]) -> None:
    """The course page (the due date) and the token page (when made) in the course's zone,
    named, as the grades are."""
    _schedule(sessions, late_course.slug, timedelta(days=-1))
    prof = Browser(late_course.settings, late_course.prof)
    listed = _found(rf'<th scope="row">{late_course.slug} .*?</th>(.*?)</tr>', prof.client.get(f"/courses/{late_course.slug}").text)
    assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d E[SD]T</td>", listed), listed
    page = prof.client.get("/settings/tokens").text
    made = prof.client.post("/settings/tokens", data={"csrf_token": prof.csrf(page), "name": "zone-check",
                                                      "scope": "submit"})
    token_row = _found(r'<th scope="row">zone-check</th>(.*?)</tr>', made.text)
    assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d E[SD]T</td>\s*<td>never</td>", token_row), token_row


def test_the_form_gives_way_to_the_reason_once_the_late_window_closes(late_course: LateCourse,
                                                            sessions: sessionmaker[Session]) -> None:
    _schedule(sessions, late_course.slug, timedelta(days=6))
    student = Browser(late_course.settings, late_course.student)
    page = student.client.get("/").text
    # Still open elsewhere: this assignment alone is refused, in words, and cannot be chosen.
    line = _text(_found(rf'id="deadline-{late_course.slug}">(.*?)</li>', page))
    assert re.search(rf"Uploads to {late_course.slug} closed at [-\d: ]+ E[SD]T, when its late window ended; "
                     "it takes no more[.]", line), line
    assert re.search(rf'<option value="{late_course.slug}" disabled>[^<]+: [^<]+ \({late_course.slug}\) '
                     r"\(uploads closed\)</option>", page)  # by course and title (issue 51)
    assert 'id="upload-closed"' not in page
    with session_scope(sessions) as session:  # now only in this course: every upload is refused
        user = get_or_create_user(session, late_course.student, Role.student)
        session.execute(delete(Enrollment).where(Enrollment.user_id == user.id,
                                                 Enrollment.course_id != get_assignment(session, late_course.slug).course_id))
    page = student.client.get("/").text
    closed = _found(r'id="upload-closed">(.*?)</p>', page)
    assert 'action="/submit"' not in page and "Uploads are closed, so there is no upload form." in closed
    refused = student.client.post("/submit", data={"csrf_token": student.csrf(page), "assignment": late_course.slug},
                                  files={"file": ("hw.zip", minimal_zip(), "application/zip")}, follow_redirects=False)
    assert refused.status_code == 403
    said = _found(r'id="upload-error">(.*?)</p>', refused.text)
    assert said.startswith(f"Uploads to {late_course.slug} closed at ")  # a sentence: the POST's words,
    assert said in _text(closed)  # shown before the upload too
    _schedule(sessions, late_course.slug, timedelta(days=-1))  # open again for the other tests
