"""A student chooses which of their own runs counts, where the course allows it (issue 18), on
real PostgreSQL: off by default (no button, a forged form refused in words, nothing changed);
the settings page (or `grader schedule --students-choose`) turns it on; the student's choice is
then the gradebook page's, its CSV's and its JSON's run, named as the student's; a run staff
chose wins over it and cannot be undone by the student; turning the option off sets their
choice aside."""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.auth.credentials import issue_token
from grader.cli.main import app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Role
from grader.settings import Settings, get_settings
from tests.service.conftest import auth
from tests.service.test_counted_run import Course, course_with_runs
from tests.service.test_web_confirmations import confirm_form
from tests.service.test_web_settings import Browser

SCHEDULE = {"release": "", "due": "", "grace": "", "late_window": "", "penalty_per_day": "", "score_policy": "latest"}


@pytest.fixture(scope="module")
def course(sessions: sessionmaker[Session]) -> Course:
    return course_with_runs(sessions, "choose")


@pytest.fixture(scope="module")
def token(sessions: sessionmaker[Session], course: Course) -> str:
    with session_scope(sessions) as session:
        return issue_token(session, get_or_create_user(session, course.prof, Role.instructor), "choose")


@pytest.fixture(scope="module")
def prof(settings: Settings, course: Course) -> Iterator[Browser]:
    yield Browser(settings, course.prof)


@pytest.fixture(scope="module")
def student(settings: Settings, course: Course) -> Iterator[Browser]:
    yield Browser(settings, course.student)


def _counted(prof: Browser, course: Course, token: str) -> tuple[int, float, str | None, str | None, str]:
    """The student's gradebook row: JSON run, JSON total, JSON chosen_by, what the page's row
    says of who chose it, and the CSV's total."""
    api = prof.client.get(f"/api/v1/assignments/{course.slug}/gradebook", headers=auth(token)).json()
    row = next(r for r in api["rows"] if r["user"] == course.student)
    book = prof.client.get("/gradebook", params={"assignment": course.slug}).text
    html = re.search(rf'<th scope="row">{course.student}</th>(.*?)</tr>', book, re.DOTALL)
    assert html, book
    chosen = re.search(r'class="hint chosen"[^>]*>([^<]+)<', html.group(1))
    line = next(r for r in csv.DictReader(io.StringIO(prof.client.get(
        "/gradebook-detailed.csv", params={"assignment": course.slug}).text)) if r["SIS Login ID"] == course.student)
    return row["run_id"], row["total"], row["chosen_by"], chosen.group(1) if chosen else None, \
        line[f"{course.title} final (100)"]


def _choose(student: Browser, run_id: int) -> str:
    sent = student.client.post("/submissions/counted", data={"csrf_token": student.page_csrf("/submissions"),
                                                             "run_id": str(run_id)}, follow_redirects=False)
    assert sent.status_code == 303, sent.text
    return str(sent.headers["location"])


def _allow(prof: Browser, course: Course, allowed: bool, changes: str | None = None) -> None:
    """Let students choose (or not); `changes`: the student whose grade that changes, so the
    save lands on its preview first and is confirmed there."""
    here = f"/assignments/{course.slug}/settings"
    data = SCHEDULE | {"csrf_token": prof.page_csrf(here)} | ({"students_choose": "on"} if allowed else {})
    sent = prof.client.post(here, data=data, follow_redirects=False)
    if changes is not None:
        assert sent.status_code == 200 and f'<td data-label="Student">{changes}</td>' in sent.text, sent.text
        action, fields = confirm_form(sent.text)
        sent = prof.client.post(action, data=fields, follow_redirects=False)
    assert sent.status_code == 303, sent.text
    box = re.search(r'<input type="checkbox" id="s-students_choose"[^>]*>', prof.client.get(here).text)
    assert box and ("checked" in box.group(0)) is allowed


def test_off_by_default_a_choice_is_refused_in_words(prof: Browser, student: Browser, course: Course,
                                                     token: str) -> None:
    policy = (course.newer, 60.0, None, None, "60")
    assert _counted(prof, course, token) == policy
    assert "Count this run" not in student.client.get("/submissions").text
    assert "Count this run instead" not in student.client.get(f"/runs/{course.older}").text
    refused = _choose(student, course.older)
    assert refused == f"/submissions?refused=not_allowed&assignment={course.slug}#counting"
    assert (f"The staff of {course.slug} have not let students choose which run counts"
            in student.client.get(refused).text)
    assert _counted(prof, course, token) == policy
    # The words are the page's own: a link cannot put others there.
    forged = student.client.get("/submissions", params={"refused": "<b>hello</b>", "assignment": course.slug})
    assert "<b>hello</b>" not in forged.text and 'id="counted-refused"' not in forged.text


def test_allowed_the_students_choice_counts_until_staff_choose_or_it_is_turned_off(
        settings: Settings, prof: Browser, student: Browser, course: Course, token: str) -> None:
    _allow(prof, course, True)
    history = student.client.get("/submissions").text
    assert f'aria-label="Count run {course.older}"' in history
    assert f'aria-label="Count run {course.newer}"' not in history  # it counts already
    assert f'aria-label="Count run {course.queued}"' not in history  # not scored

    assert _choose(student, course.older) == f"/submissions#counts-{course.slug}"
    mine = (course.older, 90.0, course.student, "chosen by the student", "90")
    assert _counted(prof, course, token) == mine
    assert "you chose" in student.client.get("/submissions").text
    staff_page = prof.client.get(f"/assignments/{course.slug}/students/{course.student}").text
    assert "The gradebook counts the run chosen by the student" in staff_page

    # Not a scored run, nor another student's.
    assert _choose(student, course.queued) == f"/submissions?refused=unscored&assignment={course.slug}#counting"
    other = student.client.post("/submissions/counted", data={"csrf_token": student.page_csrf("/submissions"),
                                                              "run_id": str(course.others_run)})
    assert other.status_code == 404
    assert _counted(prof, course, token) == mine

    # Turned off, the choice is set aside (the policy's pick), and counts again once back on.
    _allow(prof, course, False, changes=course.student)
    assert _counted(prof, course, token) == (course.newer, 60.0, None, None, "60")
    _allow(prof, course, True, changes=course.student)
    assert _counted(prof, course, token) == mine

    # Staff's choice wins: the student can neither replace nor undo it.
    here = f"/assignments/{course.slug}/students/{course.student}"
    prof.client.post(f"{here}/counted", data={"csrf_token": prof.page_csrf(here), "run_id": str(course.newer)})
    assert _counted(prof, course, token) == (course.newer, 60.0, course.prof, "chosen by staff", "60")
    assert "Count this run" not in student.client.get("/submissions").text
    assert "Count this run instead" not in student.client.get(f"/runs/{course.older}").text
    staff_chose = f"/submissions?refused=staff_chose&assignment={course.slug}#counting"
    assert _choose(student, course.older) == staff_chose
    undo = student.client.post("/submissions/counted/remove", follow_redirects=False,
                               data={"csrf_token": student.page_csrf("/submissions"), "assignment": course.slug})
    assert undo.headers["location"] == staff_chose
    assert "Staff chose which of your runs counts" in student.client.get(staff_chose).text
    prof.client.post(f"{here}/counted/remove", data={"csrf_token": prof.page_csrf(here)})

    # The student's own choice (from the run page), then back to the policy's pick.
    run_page = student.client.get(f"/runs/{course.older}").text
    assert f'The gradebook counts <a href="/runs/{course.newer}">run {course.newer}</a>, not this one.' in run_page
    sent = student.client.post("/submissions/counted", follow_redirects=False, data={
        "csrf_token": student.csrf(run_page), "run_id": str(course.older), "back": "run"})
    assert sent.headers["location"] == f"/runs/{course.older}#run-counts"
    run_page = student.client.get(f"/runs/{course.older}").text
    assert "The gradebook counts this run (you chose it)." in run_page and "Count this run instead" not in run_page
    assert "The gradebook counts this run (chosen by the student)." in prof.client.get(f"/runs/{course.older}").text
    assert _counted(prof, course, token) == mine
    undo = student.client.post("/submissions/counted/remove", follow_redirects=False,
                               data={"csrf_token": student.page_csrf("/submissions"), "assignment": course.slug})
    assert undo.headers["location"] == f"/submissions#counts-{course.slug}"
    assert _counted(prof, course, token) == (course.newer, 60.0, None, None, "60")


def test_grader_schedule_turns_the_choice_on_and_off(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                     sessions: sessionmaker[Session], course: Course) -> None:
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        on = CliRunner().invoke(app, ["schedule", course.slug, "--no-students-choose", "--yes"])
        assert on.exit_code == 0, on.output
        assert "students do not choose which run counts" in on.output
        on = CliRunner().invoke(app, ["schedule", course.slug, "--students-choose", "--yes"])
        assert "students choose which run counts" in on.output
        kept = CliRunner().invoke(app, ["schedule", course.slug])  # no option: unchanged
        assert "students choose which run counts" in kept.output
    finally:
        get_settings.cache_clear()
    with session_scope(sessions) as session:
        assert session.query(Assignment).filter_by(slug=course.slug).one().students_choose_counted_run
