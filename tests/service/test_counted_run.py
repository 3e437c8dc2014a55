"""Staff choose which run counts (issue 18), on real PostgreSQL: a run pinned on the staff
history page of a student, one the score policy would not pick, is the one the gradebook page,
its CSV, the JSON API and both history pages show; unpinning returns to the policy's pick.
Only staff of the assignment may pin, and only a scored run of that student."""
from __future__ import annotations

import csv
import io
import re
import uuid
from dataclasses import dataclass

import pytest
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Role, RunState, utcnow
from grader.models import Course as CourseRow
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_web_settings import PASSWORD, Browser

SCORES = (90.0, 60.0)  # the older upload scores better; the "latest" policy picks the newer


@dataclass
class Course:
    slug: str
    title: str
    prof: str
    student: str
    other: str
    older: int  # scored 90
    newer: int  # scored 60: the "latest" policy's pick
    queued: int  # the student's run not scored
    others_run: int  # the other student's, scored 70


def course_with_runs(sessions: sessionmaker[Session], prefix: str) -> Course:
    """An assignment of its own (score policy "latest"), its instructor and two students
    enrolled in it alone, the student's two scored runs (the older better) and one queued, and
    the other student's scored run."""
    tag = uuid.uuid4().hex[:6]
    slug, title = f"{prefix}-{tag}", f"{prefix} {tag}"
    with session_scope(sessions) as session:
        assignment = Assignment(slug=slug, title=title, course=CourseRow(slug=slug, title=title), total_points=100, score_policy="latest")
        session.add(assignment)
        session.flush()
        people = [get_or_create_user(session, f"{prefix}-{who}-{tag}", role, [assignment.course])
                  for who, role in (("prof", Role.instructor), ("stu", Role.student), ("oth", Role.student))]
        for user in people:
            set_password(user, PASSWORD, SUITE_ARGON2)
        prof, student, other = people
        runs = []
        for i, (who, score) in enumerate(((student, SCORES[0]), (student, SCORES[1]), (other, 70.0))):
            blob = StoredBlob(sha256=f"{prefix}{i}".encode().hex().ljust(64, "0")[:64], size=10)
            _sub, run = record_submission(session, who, assignment, f"hw{i}.zip", blob)
            run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
            session.flush()
            runs.append(run.id)
        _sub, queued = record_submission(session, student, assignment, "hw3.zip",
                                         StoredBlob(sha256=f"{prefix}q".encode().hex().ljust(64, "0")[:64], size=10))
        session.flush()
        return Course(slug, title, prof.username, student.username, other.username, runs[0], runs[1], queued.id,
                      runs[2])


@pytest.fixture(scope="module")
def course(sessions: sessionmaker[Session]) -> Course:
    return course_with_runs(sessions, "pin")


def _shown(prof: Browser, student: Browser, course: Course, token: str) -> dict[str, object]:
    """The counted run (or its total) as each place shows it."""
    book = prof.client.get("/gradebook", params={"assignment": course.slug}).text
    row = re.search(rf'<th scope="row">{course.student}</th>(.*?)</tr>', book, re.DOTALL)
    assert row, book
    line = next(r for r in csv.DictReader(io.StringIO(prof.client.get("/gradebook-detailed.csv",
                                                                      params={"assignment": course.slug}).text))
                if r["SIS Login ID"] == course.student)
    api = prof.client.get(f"/api/v1/assignments/{course.slug}/gradebook", headers=auth(token)).json()
    api_row = next(r for r in api["rows"] if r["user"] == course.student)
    staff_page = prof.client.get(f"/assignments/{course.slug}/students/{course.student}").text
    history = student.client.get("/submissions").text
    counted_staff = re.search(r'Run (\d+)</a>: [^\n]*?class="counts"', staff_page)
    counted_student = re.search(r'Run (\d+)</a>: [^\n]*?class="counts"', history)
    return {"page": re.search(r'href="/runs/(\d+)">Run', row.group(1)).group(1),  # type: ignore[union-attr]
            "csv": line[f"{course.title} final (100)"],
            "json": (api_row["run_id"], api_row["total"], api_row["chosen_by"], api_row["chosen_reason"]),
            "staff": counted_staff.group(1) if counted_staff else None,
            "student": counted_student.group(1) if counted_student else None,
            "chosen": ("chosen by staff" in history, "chosen by staff" in staff_page,
                       "chosen by staff" in row.group(1), "regraded on a quiet GPU" in history)}


def test_a_pinned_run_counts_everywhere_until_unpinned(settings: Settings, sessions: sessionmaker[Session],
                                                       course: Course) -> None:
    prof, student = Browser(settings, course.prof), Browser(settings, course.student)
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, course.prof, Role.instructor), "pin")
    older, newer = course.older, course.newer
    policy = {"page": str(newer), "csv": "60", "json": (newer, 60.0, None, None), "staff": str(newer),
              "student": str(newer), "chosen": (False, False, False, False)}
    assert _shown(prof, student, course, token) == policy

    here = f"/assignments/{course.slug}/students/{course.student}"
    sent = prof.client.post(f"{here}/counted", data={"csrf_token": prof.page_csrf(here), "run_id": str(older),
                                                     "reason": "regraded on a quiet GPU"}, follow_redirects=False)
    assert sent.status_code == 303 and sent.headers["location"] == f"{here}#counted"
    assert _shown(prof, student, course, token) == {
        "page": str(older), "csv": "90", "json": (older, 90.0, course.prof, "regraded on a quiet GPU"),
        "staff": str(older), "student": str(older), "chosen": (True, True, True, True)}

    removed = prof.client.post(f"{here}/counted/remove", data={"csrf_token": prof.page_csrf(here)},
                               follow_redirects=False)
    assert removed.status_code == 303
    assert _shown(prof, student, course, token) == policy


def test_only_staff_pin_and_only_a_scored_run(settings: Settings, course: Course) -> None:
    here = f"/assignments/{course.slug}/students/{course.student}"
    prof, other = Browser(settings, course.prof), Browser(settings, course.other)
    refused = prof.client.post(f"{here}/counted", data={"csrf_token": prof.page_csrf(here),
                                                        "run_id": str(course.queued)}, follow_redirects=False)
    assert refused.headers["location"] == f"{here}?error=unscored#counted"
    assert "Only a scored run of" in prof.client.get(refused.headers["location"]).text
    for path in (f"{here}/counted", f"{here}/counted/remove"):
        denied = other.client.post(path, data={"csrf_token": other.page_csrf("/"), "run_id": str(course.older)})
        assert denied.status_code == 403  # a student of the course: the page says only its staff grade
    assert "chosen by staff" not in prof.client.get(here).text
