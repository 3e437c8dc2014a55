"""Displays that do not mislead (issue 51), on real PostgreSQL: a staff adjustment that the
ceiling (total points + extra credit) or the floor (0) cuts says so on every page, export and
notice that shows the grade; `grader status` prints the grade the run page shows (a manual
grade over a run that scored 0, and the grade in the assignment from a run that does not
count); `grader schedule` words its durations as the pages do."""
from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.auth.credentials import issue_token
from grader.cli.main import app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Course, Role, Run, RunState, utcnow
from grader.notify import body, run_notice
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings, get_settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import REDIS_URL, auth, served
from tests.service.test_staff_workflow import post_form, text_of
from tests.service.test_web_settings import PASSWORD, Browser


@dataclass
class Shown:
    """An assignment of `points` in a course of its own, its instructor and a student of it."""

    slug: str
    title: str
    prof: str
    student: str
    settings: Settings


def _shown(settings: Settings, sessions: sessionmaker[Session], points: float) -> Shown:
    tag = uuid.uuid4().hex[:6]
    slug, title = f"shown-{tag}", f"Shown {tag}"
    with session_scope(sessions) as session:
        course = Course(slug=slug, title=f"Course {tag}")
        session.add(Assignment(slug=slug, title=title, total_points=points, course=course))
        session.flush()
        prof = get_or_create_user(session, f"shownprof-{tag}", Role.instructor, [course])
        student = get_or_create_user(session, f"shownstu-{tag}", Role.student, [course])
        for user in (prof, student):
            set_password(user, PASSWORD, SUITE_ARGON2)
            user.email = f"{user.username}@example.edu"
        return Shown(slug, title, prof.username, student.username, settings)


@pytest.fixture(scope="module")
def own(settings: Settings) -> Iterator[Settings]:
    """The suite's settings on a queue of this module's own (no worker takes its runs)."""
    changed = settings.model_copy(update={"task_queue": f"kg-shown-{uuid.uuid4().hex[:6]}"})
    yield changed
    redis.Redis.from_url(REDIS_URL).delete(changed.task_queue)


def scored_run(sessions: sessionmaker[Session], shown: Shown, score: float, state: RunState = RunState.scored) -> int:
    """A new upload of the student, recorded final as the worker would: its run id."""
    with session_scope(sessions) as session:
        student = get_or_create_user(session, shown.student, Role.student)
        assignment = session.scalars(select(Assignment).where(Assignment.slug == shown.slug)).one()
        _, run = record_submission(session, student, assignment, "hw.zip", StoredBlob(uuid.uuid4().hex * 2, 10))
        run.state, run.finished_at = state, utcnow()
        run.score = score if state is RunState.scored else None
        return run.id


def test_a_capped_adjustment_says_so_wherever_the_grade_is_shown(own: Settings,
                                                                  sessions: sessionmaker[Session]) -> None:
    """+2 on a 10/10 run: 10 / 10 with "adjusted +2, capped at 10", never a bare "adjusted +2"."""
    shown = _shown(own, sessions, 10)
    run_id = scored_run(sessions, shown, 10)
    prof, student = Browser(own, shown.prof), Browser(own, shown.student)
    assert post_form(prof, f"/runs/{run_id}", f"/runs/{run_id}/adjustments", points="2", reason="Clear write-up") == 303
    because = "so 10 of 10 points (capped at 10: the most the assignment allows)"
    history = f"/assignments/{shown.slug}/students/{shown.student}"
    for who, path in ((student, f"/runs/{run_id}"), (student, "/submissions"), (prof, history),
                      (prof, f"/gradebook?assignment={shown.slug}")):
        words = text_of(who.client.get(path).text)
        assert "(adjusted +2, capped at 10: Clear write-up)" in words, path
    assert because in text_of(student.client.get(f"/runs/{run_id}").text)
    detailed = prof.client.get("/gradebook-detailed.csv", params={"assignment": shown.slug}).text
    line = next(r for r in csv.DictReader(io.StringIO(detailed)) if r["SIS Login ID"] == shown.student)
    assert line[f"{shown.title} final (10)"] == "10" and because in line["Grade reason"]
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, shown.student, Role.student), "shown")
        notice = body(run_notice(session, session.get_one(Run, run_id), own))  # type: ignore[arg-type]
    assert because in notice
    grade = student.client.get(f"/api/v1/assignments/{shown.slug}/students/{shown.student}/grade",
                               headers=auth(token)).json()["grade"]
    assert (grade["final_score"], grade["adjustment"], grade["clamped_to"]) == (10, 2, 10)


def test_a_floored_adjustment_says_so(own: Settings, sessions: sessionmaker[Session]) -> None:
    shown = _shown(own, sessions, 10)
    run_id = scored_run(sessions, shown, 3)
    prof = Browser(own, shown.prof)
    assert post_form(prof, f"/runs/{run_id}", f"/runs/{run_id}/adjustments", points="-5", reason="Copied") == 303
    words = text_of(Browser(own, shown.student).client.get(f"/runs/{run_id}").text)
    assert "(adjusted -5, floored at 0: Copied)" in words and "so 0 of 10 points (floored at 0" in words


def _status(url: str, token: str, run_id: int) -> str:
    done = CliRunner().invoke(app, ["status", str(run_id)], env={"KG_URL": url, "KG_TOKEN": token},
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.stdout


def test_grader_status_prints_the_grade_the_run_page_shows(own: Settings, sessions: sessionmaker[Session]) -> None:
    """A run that scored 0 with a manual 85 on the student's grade: the CLI says 85, as the page."""
    shown = _shown(own, sessions, 100)
    zero = scored_run(sessions, shown, 0)
    prof = Browser(own, shown.prof)
    history = f"/assignments/{shown.slug}/students/{shown.student}"
    assert post_form(prof, history, f"{history}/grade", kind="manual", points="85", reason="Graded by hand") == 303
    page = text_of(Browser(own, shown.student).client.get(f"/runs/{zero}").text)
    assert "Grade: 85 / 100" in page
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, shown.student, Role.student), "shown")
    with served(own) as url:
        counted = _status(url, token, zero)
        assert f"grade 85 / 100\n  Manual grade by {shown.prof}: 85 of 100 points (Graded by hand)." in counted
        assert "the gradebook counts this run" in counted
        failed = scored_run(sessions, shown, 0, RunState.failed)
        other = _status(url, token, failed)
        assert f"the gradebook counts run {zero}, not this one; the grade in {shown.slug}: 85 / 100" in other
        assert "\ngrade " not in other  # a failed run has no grade of its own


def test_grader_schedule_words_its_durations(own: Settings, sessions: sessionmaker[Session],
                                             settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    shown = _shown(own, sessions, 100)
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        done = CliRunner().invoke(app, ["schedule", shown.slug, "--due", "2026-12-01T23:59", "--grace", "90m",
                                        "--late-window", "3d"])
        none = CliRunner().invoke(app, ["schedule", shown.slug, "--grace", "0"])
    finally:
        get_settings.cache_clear()
    assert done.exit_code == 0, done.output
    assert "grace 1 h 30 min, late window 3 d," in done.output and "days" not in done.output
    assert none.exit_code == 0 and "grace none, late window 3 d," in none.output, none.output
