"""Staff choose which run counts (issue 18), in Chromium: on a student's staff history page the
instructor counts an older, better run in place of the "latest" policy's pick, with a reason;
the gradebook then shows that run and its total, marked as chosen by staff; going back to the
policy's pick restores the newer run."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from playwright.sync_api import BrowserContext, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Role, RunState, utcnow
from grader.models import Course as CourseRow
from grader.passwords import set_password
from grader.service import record_submission
from grader.storage.blobstore import StoredBlob
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2


@dataclass
class Course:
    slug: str
    prof: str
    student: str
    older: int  # scored 90
    newer: int  # scored 60: the "latest" policy's pick


def two_scored_runs(sessions: sessionmaker[Session], prefix: str) -> Course:
    """An assignment of its own (score policy "latest") with an instructor and a student, both
    enrolled in it alone, and the student's two scored runs: the older better than the newer."""
    tag = uuid.uuid4().hex[:6]
    slug = f"{prefix}-{tag}"
    with session_scope(sessions) as session:
        assignment = Assignment(slug=slug, title=f"{prefix} {tag}", course=CourseRow(slug=slug, title=f"{prefix} {tag}"), total_points=100, score_policy="latest")
        session.add(assignment)
        session.flush()
        prof = get_or_create_user(session, f"{prefix}-prof-{tag}", Role.instructor, [assignment.course])
        student = get_or_create_user(session, f"{prefix}-stu-{tag}", Role.student, [assignment.course])
        for user in (prof, student):
            set_password(user, PASSWORD, SUITE_ARGON2)
        runs = []
        for i, score in enumerate((90.0, 60.0)):
            blob = StoredBlob(sha256=f"{prefix}{i}".encode().hex().ljust(64, "0")[:64], size=10)
            _sub, run = record_submission(session, student, assignment, f"hw{i}.zip", blob)
            run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
            session.flush()
            runs.append(run.id)
        return Course(slug, prof.username, student.username, runs[0], runs[1])


@pytest.fixture
def course(sessions: sessionmaker[Session]) -> Course:
    return two_scored_runs(sessions, "pinb")


def test_staff_pin_a_run_and_the_gradebook_counts_it(context: BrowserContext, course: Course) -> None:
    page = log_in(context, course.prof)
    page.goto(f"/gradebook?assignment={course.slug}")
    row = page.locator("#gradebook tbody tr", has=page.get_by_role("rowheader", name=course.student))
    expect(row.locator(".final-grade")).to_have_text("60")
    page.goto(f"/assignments/{course.slug}/students/{course.student}")
    page.get_by_label(f"Why run {course.older} counts (optional)").fill("Measured on a noisy GPU")
    page.get_by_role("button", name=f"Count run {course.older}").click()
    counted = page.locator("#counted")
    expect(counted).to_contain_text("chosen by staff")
    expect(counted).to_contain_text(f"{course.prof}: Measured on a noisy GPU")
    expect(counted).to_contain_text(f"run {course.older}, 90 / 100")
    item = page.locator("ul.plain li", has=page.get_by_role("link", name=f"Run {course.older}", exact=True))
    expect(item.locator(".counts")).to_have_text("counts")
    check_page(page)

    page.get_by_role("link", name="Back to the gradebook").click()
    row = page.locator("#gradebook tbody tr", has=page.get_by_role("rowheader", name=course.student))
    expect(row.locator(".final-grade")).to_have_text("90")
    expect(row.get_by_role("link", name=f"Run {course.older}", exact=True)).to_have_count(1)
    expect(row.locator(".chosen")).to_have_text("chosen by staff")

    page.goto(f"/assignments/{course.slug}/students/{course.student}")
    page.get_by_role("button", name="Back to the score policy's pick").click()
    expect(page.locator("#counted")).not_to_contain_text("chosen by staff")
    expect(page.locator("#counted")).to_contain_text(f"run {course.newer}, 60 / 100")
    page.goto(f"/gradebook?assignment={course.slug}")
    row = page.locator("#gradebook tbody tr", has=page.get_by_role("rowheader", name=course.student))
    expect(row.locator(".final-grade")).to_have_text("60")
    expect(row.locator(".chosen")).to_have_count(0)
