"""A semester's grading in Chromium (issue 30, the grades' part of the walk): a student asks for a
regrade from their run page; a TA of the course (not an instructor) sees the waiting request
counted in the navigation, answers it in the queue with an adjustment of the student's grade; the
student reads the answer and the adjusted grade; a later scored run of the student comes to count
and keeps the adjustment in the total (run page, history, gradebook); the course's Canvas CSV,
downloaded from the course page, has exactly Canvas's columns, the Points Possible line and the
adjusted total."""
from __future__ import annotations

import csv
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import enroll
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import Assignment, Course, CourseRole, Role, RunState, User, utcnow
from grader.passwords import set_password
from grader.service import record_submission
from grader.storage.blobstore import StoredBlob
from tests.browser.a11y import check_page
from tests.fixtures.passwords import SUITE_ARGON2

PASSWORD = "correct horse battery"


@dataclass
class Semester:
    course: str
    slug: str
    title: str
    ta: str
    student: str


@pytest.fixture
def semester(sessions: sessionmaker[Session]) -> Iterator[Semester]:
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        course = Course(slug=f"fall-{tag}", title="LLM Systems, fall")
        # Paused: nothing of this assignment reaches a worker; scored runs are recorded as a worker records them.
        session.add(Assignment(slug=f"hw-{tag}", title="HW4: fused kernels", total_points=100, course=course,
                               grading_paused=True))
        session.flush()
        people = {}
        for who, part in (("ta", CourseRole.ta), ("stu", CourseRole.student)):
            user = User(username=f"walk-{who}-{tag}", role=Role.student)
            session.add(user)
            session.flush()
            enroll(session, user, course, part)
            set_password(user, PASSWORD, SUITE_ARGON2)
            people[who] = user.username
        student = session.query(User).filter_by(username=people["stu"]).one()
        entry = entry_of(session, student.id, course.id)
        assert entry is not None
        entry.full_name, entry.section = "Okafor, Ada", "Lecture 1"  # as the course's roster import sets them
    yield Semester(f"fall-{tag}", f"hw-{tag}", "HW4: fused kernels", people["ta"], people["stu"])


def scored_run(sessions: sessionmaker[Session], semester: Semester, score: float) -> int:
    """A new upload of the student's, scored (as the worker records one: this machine has no GPU)."""
    with session_scope(sessions) as session:
        student = session.query(User).filter_by(username=semester.student).one()
        assignment = session.query(Assignment).filter_by(slug=semester.slug).one()
        _, run = record_submission(session, student, assignment, "hw4.zip", StoredBlob(uuid.uuid4().hex * 2, 10))
        run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
        return run.id


def log_in(browser: Browser, base_url: str, username: str) -> Page:
    page = browser.new_context(base_url=base_url, accept_downloads=True).new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    return page


def test_a_ta_answers_with_an_adjustment_that_a_later_run_keeps(
    browser: Browser, base_url: str, sessions: sessionmaker[Session], semester: Semester, screenshot_dir: Path,
) -> None:
    first = scored_run(sessions, semester, 62)
    student = log_in(browser, base_url, semester.student)
    student.goto(f"/runs/{first}")
    expect(student.locator("#run-score")).to_have_text("62")
    student.get_by_label("Ask the staff for a regrade of this run: say why").fill(
        "Problem 2.1 timed out while the GPU was shared")
    student.get_by_role("button", name="Ask for a regrade").click()
    expect(student.locator("#regrade .request-state")).to_have_text("open, waiting for the staff")

    ta = log_in(browser, base_url, semester.ta)
    waiting = ta.locator("#nav-requests")
    expect(waiting).to_have_text("Regrade requests (1 waiting)")
    waiting.click()
    expect(ta).to_have_url(f"{base_url}/assignments/{semester.slug}/regrade-requests")
    asked = ta.locator("article.regrade-request", has_text=f"Run {first} of {semester.student}")
    expect(asked.locator(".request-reason")).to_have_text("Problem 2.1 timed out while the GPU was shared")
    expect(asked.locator(".request-grade")).to_have_text("62 of 100")
    asked.get_by_label("Reply to the student").fill("The timeout was ours: 6 points back")
    asked.get_by_label("Points to adjust by").fill("6")
    asked.get_by_role("button", name="Accept: adjust").click()
    expect(ta.locator("#decided")).to_contain_text("Request adjusted")
    expect(ta.locator("#nav-requests")).to_have_text("Regrade requests (0 waiting)")
    check_page(ta)

    student.goto(f"/runs/{first}")
    answer = student.locator("#regrade .regrade-request")
    expect(answer.locator(".request-state")).to_have_text("accepted")
    expect(answer.locator(".request-reply")).to_contain_text(f"Reply from {semester.ta}: The timeout was ours")
    expect(student.locator("#run-score")).to_have_text("68")
    expect(student.locator("#adjustments")).to_contain_text(f"+6 points by {semester.ta}")
    check_page(student)

    later = scored_run(sessions, semester, 75)  # a later upload, graded: it counts now (the newest)
    student.goto(f"/runs/{later}")
    expect(student.locator("#run-score")).to_have_text("81")  # 75 with the TA's +6
    expect(student.locator("#adjustments")).to_contain_text(f"(run {first} counted then): The timeout was ours")
    student.goto("/submissions")
    expect(student.locator(f"#counts-{semester.slug}")).to_contain_text(f"run {later}, 81 / 100")
    student.locator("#counting").screenshot(path=str(screenshot_dir / "grade-kept-by-a-later-run.png"))

    ta.goto(f"/gradebook?assignment={semester.slug}")
    row = ta.locator("#gradebook tbody tr", has=ta.get_by_role("rowheader", name=semester.student))
    expect(row.locator(".final-grade")).to_have_text("81")
    expect(row.locator(".adjusted-badge")).to_contain_text("adjusted +6: The timeout was ours")
    ta.goto(f"/courses/{semester.course}")
    with ta.expect_download() as download:
        ta.locator("#course-canvas-csv").click()
    assert download.value.suggested_filename == f"{semester.course}-canvas.csv"
    table = list(csv.reader(Path(download.value.path()).read_text().splitlines()))
    assert table == [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", semester.title],
                     ["    Points Possible", "", "", "", "", "100"],
                     ["Okafor, Ada", "", "", semester.student, "Lecture 1", "81"]]
