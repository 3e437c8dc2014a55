"""One grade everywhere (issue 18), in Chromium: a student uploads late through the form; once
the run is scored, the run page, the history, the gradebook and its downloaded CSV show the
same final grade with the late badge, the raw score and the penalty; the upload page shows the
deadlines and, after the late window, the reason in place of the form."""
from __future__ import annotations

import csv
import io
import re
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from grader.course.deadlines import LatePolicy
from grader.course.membership import get_or_create_user
from grader.course.policies import set_schedule
from grader.db import session_scope
from grader.models import Assignment, Enrollment, ProblemResult, Role, Run, RunState, utcnow
from grader.models import Course as CourseRow
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.fixtures.passwords import SUITE_ARGON2

PASSWORD = "correct horse battery"
RAW = (20.0, 20.0, 20.0, 20.0, 16.75)  # 96.75; due 1 d 2 h ago, 1 h grace: 2 started days, 20% off
FINAL, RAW_TEXT, PENALTY = "77.4", "96.75", "19.35"


@dataclass
class Course:
    slug: str
    title: str
    prof: str
    student: str


@pytest.fixture
def course(sessions: sessionmaker[Session]) -> Iterator[Course]:
    tag = uuid.uuid4().hex[:6]
    slug, title = f"lateb-{tag}", f"Late {tag}"
    with session_scope(sessions) as session:
        # Paused: the upload's run is never sent to a worker; the test scores it as one would.
        assignment = Assignment(slug=slug, title=title, course=CourseRow(slug=slug, title=title), total_points=100, grading_paused=True)
        session.add(assignment)
        session.flush()
        prof = get_or_create_user(session, f"lateb-prof-{tag}", Role.instructor)
        student = get_or_create_user(session, f"lateb-stu-{tag}", Role.student)
        for user in (prof, student):
            set_password(user, PASSWORD, SUITE_ARGON2)
        # Only in this course, so the upload form offers (and closes) this assignment alone.
        session.execute(delete(Enrollment).where(Enrollment.user_id == student.id,
                                                 Enrollment.course_id != assignment.course_id))
        names = prof.username, student.username
    yield Course(slug, title, *names)


def _schedule(sessions: sessionmaker[Session], slug: str, due_ago: timedelta) -> None:
    with session_scope(sessions) as session:
        set_schedule(session, slug, LatePolicy(due_at=utcnow() - due_ago, grace=timedelta(hours=1),
                                               late_window=timedelta(days=5), penalty_per_day=0.1), "latest")


def _log_in(context: BrowserContext, username: str) -> Page:
    page = context.new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    return page


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("llmsys_hw4/src/README", f"late {uuid.uuid4().hex}")
    return buf.getvalue()


def _score_the_run(sessions: sessionmaker[Session], run_id: int) -> None:
    with session_scope(sessions) as session:
        run = session.get(Run, run_id)
        assert run is not None and run.state is RunState.queued
        run.state, run.score, run.finished_at = RunState.scored, sum(RAW), utcnow()
        run.results = [ProblemResult(problem_id=f"p{i}", title=f"Problem {i}", status="passed", points=p,
                                     max_points=20.0) for i, p in enumerate(RAW, 1)]


def test_late_upload_same_grade_on_every_page_then_the_form_closes(
    browser: Browser, base_url: str, context: BrowserContext, sessions: sessionmaker[Session], course: Course,
    screenshot_dir: Path,
) -> None:
    _schedule(sessions, course.slug, timedelta(days=1, hours=2))
    page = _log_in(context, course.student)
    deadline = page.locator(f"#deadline-{course.slug}")
    expect(deadline).to_contain_text("Grace period until")
    expect(deadline).to_contain_text(re.compile(r"Time left: (\d+ \w+ ?)+ until the late window closes"))
    expect(page.locator("#upload-closed")).to_have_count(0)
    page.get_by_label(re.compile("Submission")).set_input_files(
        {"name": "hw.zip", "mimeType": "application/zip", "buffer": _zip()})
    page.get_by_role("button", name="Upload and grade").click()
    page.wait_for_url(re.compile(r"/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    _score_the_run(sessions, run_id)

    page.reload()
    expect(page.locator("#run-score")).to_have_text(FINAL)
    expect(page.locator("#run-status .score .late-badge")).to_have_text("Late")
    expect(page.locator("#run-grade-reason")).to_contain_text(
        f"Raw score {RAW_TEXT}, late penalty {PENALTY} points. Uploaded ")
    expect(page.locator("#run-grade-reason")).to_contain_text(f"{RAW_TEXT} - {PENALTY} = {FINAL} of 100 points.")
    reason = page.locator("#run-grade-reason").inner_text().split("points. ", 1)[1]
    expect(page.locator("#breakdown thead")).to_contain_text("Points (raw, before the late penalty)")
    check_page(page)
    page.screenshot(path=str(screenshot_dir / "run-late.png"), full_page=True)

    page.get_by_role("link", name="My submissions").click()
    item = page.locator("ul.plain li", has=page.get_by_role("link", name=f"Run {run_id}", exact=True))
    expect(item.locator(".run-grade")).to_have_text(f"{FINAL} points")
    expect(item.locator(".late-badge")).to_have_text("Late")
    expect(item).to_contain_text(f"raw {RAW_TEXT}, late penalty {PENALTY}")
    expect(item.locator(".counts")).to_have_text("counts")
    expect(page.locator(f"#counts-{course.slug}")).to_contain_text(f"run {run_id}, {FINAL} / 100")
    check_page(page)

    staff = _log_in(browser.new_context(base_url=base_url), course.prof)
    staff.goto(f"/gradebook?assignment={course.slug}")
    row = staff.locator("#gradebook tbody tr", has=staff.get_by_role("rowheader", name=course.student))
    expect(row.locator(".final-grade")).to_have_text(FINAL)
    expect(row.locator(".late-badge")).to_have_text("Late")
    expect(row).to_contain_text(f"raw {RAW_TEXT}, late penalty {PENALTY}")
    expect(row.locator(f'[title="{reason}"]')).to_have_count(1)  # the same words, on hover
    with staff.expect_download() as download:
        staff.get_by_role("link", name="Detailed CSV (penalties, adjustments, problems)").click()
    table = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    line = next(r for r in table if r["SIS Login ID"] == course.student)
    assert line[f"{course.title} final (100)"] == FINAL
    assert (line["Raw score before late penalty (100)"], line["Late penalty (points)"]) == (RAW_TEXT, PENALTY)
    assert line["Lateness"] == "late" and line["Grade reason"] == reason
    staff.context.close()

    # After the late window: no form to fill in before the refusal, only the reason.
    _schedule(sessions, course.slug, timedelta(days=6))
    page.goto("/")
    closed = page.locator("#upload-closed")
    expect(closed).to_contain_text("Uploads are closed, so there is no upload form.")
    expect(closed).to_contain_text(re.compile(rf"Uploads to {course.slug} closed at .*, when its late window ended; "
                                             "it takes no more[.]"))
    expect(page.get_by_role("button", name="Upload and grade")).to_have_count(0)
    expect(page.get_by_label(re.compile("Submission"))).to_have_count(0)
    page.screenshot(path=str(screenshot_dir / "upload-closed.png"), full_page=True)
    check_page(page)
    page.set_viewport_size({"width": 390, "height": 800})
    for path in ("/", "/submissions", f"/runs/{run_id}"):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path  # no sideways page scroll
