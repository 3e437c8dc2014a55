"""Staff workflow (issue 18), in Chromium: a student asks for a regrade from the run page; staff
answer in the assignment's queue (linked from the course-operations navigation): one request
accepted by a re-grade (a new run, queued), one rejected with a reply the student then reads on
the run page; a manual adjustment with its reason, in the student's grade, and comments on the
run by the student and the staff."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Role, RunState, utcnow
from grader.models import Course as CourseRow
from grader.passwords import set_password
from grader.service import record_submission
from grader.storage.blobstore import StoredBlob
from tests.browser.a11y import check_page
from tests.fixtures.passwords import SUITE_ARGON2

PASSWORD = "correct horse battery"


@dataclass
class Course:
    slug: str
    prof: str
    student: str


@pytest.fixture
def course(sessions: sessionmaker[Session]) -> Iterator[Course]:
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        # Paused: a re-grade's run is stored and queued but never sent to a worker.
        session.add(Assignment(slug=f"flowb-{tag}", title=f"Flow {tag}", course=CourseRow(slug=f"flowb-{tag}", title=f"Flow {tag}"), total_points=100, grading_paused=True))
        session.flush()
        prof = get_or_create_user(session, f"flowb-prof-{tag}", Role.instructor)
        student = get_or_create_user(session, f"flowb-stu-{tag}", Role.student)
        for user in (prof, student):
            set_password(user, PASSWORD, SUITE_ARGON2)
        names = prof.username, student.username
    yield Course(f"flowb-{tag}", *names)


def scored_run(sessions: sessionmaker[Session], course: Course, score: float) -> int:
    """A scored run of the student's, as a worker records one."""
    with session_scope(sessions) as session:
        student = get_or_create_user(session, course.student, Role.student)
        assignment = session.query(Assignment).filter_by(slug=course.slug).one()
        _, run = record_submission(session, student, assignment, "hw.zip", StoredBlob(uuid.uuid4().hex * 2, 10))
        run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
        return run.id


def log_in(browser: Browser, base_url: str, username: str) -> Page:
    page = browser.new_context(base_url=base_url).new_page()
    page.goto("/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    return page


def fits_a_phone(page: Page) -> None:
    """At 390 px the page does not scroll sideways (tests/browser/test_layout.py checks the other pages)."""
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, page.url
    page.set_viewport_size({"width": 1100, "height": 800})


def ask_for_regrade(page: Page, run_id: int, why: str) -> None:
    page.goto(f"/runs/{run_id}")
    page.get_by_label("Ask the staff for a regrade of this run: say why").fill(why)
    page.get_by_role("button", name="Ask for a regrade").click()
    expect(page.locator("#regrade .request-state")).to_have_text("open, waiting for the staff")
    expect(page.locator("#regrade-request-form")).to_have_count(0)  # one open request per run


def test_regrade_requests_accepted_by_a_regrade_and_rejected_with_a_reply(
    browser: Browser, base_url: str, context: BrowserContext, sessions: sessionmaker[Session], course: Course,
    screenshot_dir: Path,
) -> None:
    accepted, rejected = scored_run(sessions, course, 60.0), scored_run(sessions, course, 70.0)
    student = log_in(browser, base_url, course.student)
    ask_for_regrade(student, accepted, "Problem 3 timed out while the GPU was shared")
    ask_for_regrade(student, rejected, "The speedup looks low to me")
    check_page(student)

    staff = log_in(browser, base_url, course.prof)
    staff.goto(f"/assignments/{course.slug}/settings")
    staff.get_by_role("navigation", name=f"Course operations for {course.slug}").get_by_role(
        "link", name="Regrade requests").click()
    expect(staff.locator("#open-count")).to_contain_text("2 open requests, oldest first.")
    first = staff.locator("article.regrade-request", has_text=f"Run {accepted} of")
    expect(first.locator(".request-reason")).to_have_text("Problem 3 timed out while the GPU was shared")
    expect(first.locator(".request-grade")).to_have_text("60 of 100")
    first.get_by_label("Reply to the student").fill("Graded again on a quiet GPU")
    first.get_by_role("button", name="Accept: re-grade").click()
    expect(staff.locator("#decided")).to_contain_text("Request re-graded")
    second = staff.locator("article.regrade-request", has_text=f"Run {rejected} of")
    second.get_by_label("Reply to the student").fill("The speedup is within the measured interval")
    second.get_by_role("button", name="Reject").click()
    expect(staff.locator("#decided")).to_contain_text("Request rejected")
    expect(staff.locator("#open-count")).to_have_text("0 open requests, oldest first.")
    expect(staff.locator("#show-answered")).to_have_text("Answered (2)")
    expect(staff.locator("#show-mine")).to_have_text("Answered by me (2)")
    check_page(staff)
    fits_a_phone(staff)
    staff.screenshot(path=str(screenshot_dir / "regrade-requests.png"), full_page=True)

    student.goto(f"/runs/{accepted}")
    answer = student.locator("#regrade .regrade-request")
    expect(answer.locator(".request-state")).to_have_text("accepted")
    expect(answer.locator(".request-reply")).to_contain_text(f"Reply from {course.prof}: Graded again on a quiet GPU")
    answer.get_by_role("link", name="run").click()  # the re-grade: a new run of the same upload, queued
    expect(student.locator("#run-state")).to_have_text("queued")
    expect(student.locator("h1 + p.hint")).to_contain_text("re-grade")
    student.goto(f"/runs/{rejected}")
    answer = student.locator("#regrade .regrade-request")
    expect(answer.locator(".request-state")).to_have_text("rejected")
    expect(answer.locator(".request-reply")).to_contain_text("The speedup is within the measured interval")
    expect(student.locator("#run-score")).to_have_text("70")  # a rejection leaves the grade
    expect(student.get_by_label("Ask the staff for a regrade of this run: say why")).to_be_visible()  # ask again
    fits_a_phone(student)
    student.locator("#regrade").screenshot(path=str(screenshot_dir / "run-regrade-answered.png"))


def test_a_manual_adjustment_with_its_reason_reaches_the_student(
    browser: Browser, base_url: str, context: BrowserContext, sessions: sessionmaker[Session], course: Course,
) -> None:
    run_id = scored_run(sessions, course, 60.0)
    staff = log_in(browser, base_url, course.prof)
    staff.goto(f"/runs/{run_id}")
    staff.get_by_label("Adjust the grade by").fill("-4.5")
    staff.get_by_label("Reason (shown to the student)").fill("Problem 2 reads the reference output")
    staff.get_by_role("button", name="Add adjustment").click()
    expect(staff.locator("#run-score")).to_have_text("55.5")
    check_page(staff)

    student = log_in(browser, base_url, course.student)
    student.goto(f"/runs/{run_id}")
    expect(student.locator("#run-score")).to_have_text("55.5")
    expect(student.locator("#run-grade-reason")).to_contain_text(
        "Adjusted by staff: -4.5 (Problem 2 reads the reference output), so 55.5 of 100 points.")
    expect(student.locator("#adjustments")).to_contain_text(f"-4.5 points by {course.prof}")
    expect(student.locator("#adjustment-form")).to_have_count(0)  # staff only
    student.get_by_label("Comment on this run").fill("Problem 2 computes its own output, see line 40")
    student.get_by_role("button", name="Add comment").click()
    expect(student.locator("#comments .comment-body")).to_have_text("Problem 2 computes its own output, see line 40")
    check_page(student)
    student.get_by_role("link", name="My submissions").click()
    badge = "(adjusted -4.5: Problem 2 reads the reference output)"
    expect(student.get_by_role("region", name="Submissions table").locator(".adjusted-badge")).to_have_text(badge)
    staff.goto(f"/gradebook?assignment={course.slug}")
    row = staff.locator("#gradebook tbody tr", has=staff.get_by_role("rowheader", name=course.student))
    expect(row.locator(".final-grade")).to_have_text("55.5")
    expect(row.locator(".adjusted-badge")).to_have_text(badge)
    staff.goto(f"/runs/{run_id}")  # the student's comment, and the staff's answer
    expect(staff.locator("#comments .comment-body")).to_have_text("Problem 2 computes its own output, see line 40")
    staff.get_by_label("Comment on this run").fill("Thanks: the adjustment stays")
    staff.get_by_role("button", name="Add comment").click()
    expect(staff.locator("#comments .comment").last).to_contain_text(f"{course.prof} (staff)")
    fits_a_phone(staff)
