"""A shortened late window in Chromium (issue 51): the instructor's save lands on a preview that
lists the one student whose grade it changes (8 -> 0, late by 1 d 4 h, now past the late
window) and saves nothing; confirming saves it, the gradebook shows the new grade, and the
saved notice's undo, previewed the same way, gives the 8 back. Each page passes the
accessibility checks, at desktop width and at 390 px."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect
from sqlalchemy.orm import Session, sessionmaker

from grader.course.deadlines import LatePolicy
from grader.course.membership import get_or_create_user
from grader.course.policies import set_schedule
from grader.db import session_scope
from grader.models import Assignment, Role, Run, RunState, Submission, utcnow
from grader.models import Course as CourseRow
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2

# name -> upload time after the due time (10% off per started day, a 3-day late window)
LATE = {"early": -timedelta(hours=3), "halfday": timedelta(hours=12), "onefour": timedelta(days=1, hours=4)}


@dataclass
class Klass:
    slug: str
    prof: str
    tag: str


@pytest.fixture
def klass(sessions: sessionmaker[Session]) -> Iterator[Klass]:
    tag = uuid.uuid4().hex[:6]
    slug = f"window-{tag}"
    with session_scope(sessions) as session:
        assignment = Assignment(slug=slug, title=f"Window {tag}", course=CourseRow(slug=slug, title=slug),
                                total_points=10)
        session.add(assignment)
        session.flush()  # first: new accounts join every course there is
        prof = get_or_create_user(session, f"window-prof-{tag}", Role.instructor)
        set_password(prof, PASSWORD, SUITE_ARGON2)
        due = utcnow().replace(microsecond=0) - timedelta(days=10)
        for name, after_due in LATE.items():
            student = get_or_create_user(session, f"{name}-{tag}", Role.student)
            submission = Submission(user=student, assignment=assignment, original_filename="hw.zip", size_bytes=10,
                                    sha256=uuid.uuid4().hex * 2, uploaded_at=due + after_due)
            session.add(Run(submission=submission, reason="upload", state=RunState.scored, score=10.0,
                            finished_at=utcnow()))
        set_schedule(session, slug, LatePolicy(due_at=due, late_window=timedelta(days=3), penalty_per_day=0.1),
                     "latest")
    yield Klass(slug, prof.username, tag)


def _grade(page: Page, klass: Klass, name: str) -> str:
    page.goto(f"/gradebook?assignment={klass.slug}")
    row = page.locator("#gradebook tbody tr", has=page.get_by_role("rowheader", name=f"{name}-{klass.tag}"))
    return row.locator(".final-grade").inner_text()


def _preview_rows(page: Page) -> list[list[str]]:
    """The preview's table: (student, before, after, why) a row (the name column is the login's here)."""
    rows = [row.locator("td").all_inner_texts() for row in page.locator("#grade-changes tbody tr").all()]
    return [[cells[0], *cells[2:]] for cells in rows]


def test_a_shorter_late_window_is_previewed_confirmed_and_undone(context: BrowserContext, klass: Klass,
                                                                 screenshot_dir: Path) -> None:
    page = log_in(context, klass.prof)
    assert _grade(page, klass, "onefour") == "8"
    page.goto(f"/assignments/{klass.slug}/settings")
    page.get_by_label("Late window").fill("1d")
    page.get_by_role("button", name="Save schedule").click()

    expect(page.get_by_role("heading", level=1)).to_have_text(f"Confirm the schedule change of {klass.slug}")
    expect(page.locator("#confirm-question")).to_have_text(
        f"Save this change to {klass.slug}'s schedule and policies? It changes 1 student's grade.")
    expect(page.get_by_text("Late window: 3d → 1d.")).to_be_visible()
    assert _preview_rows(page) == [[f"onefour-{klass.tag}", "8", "0", "late by 1 d 4 h: now past the late window"]]
    check_page(page)
    page.screenshot(path=str(screenshot_dir / "schedule-preview.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    check_page(page)
    expect(page.locator("#grade-changes td[data-label=After]")).to_be_in_viewport()
    page.set_viewport_size({"width": 1280, "height": 800})
    # Cancelling saves nothing.
    page.get_by_role("link", name="Cancel: Keep the schedule as it is").click()
    expect(page.get_by_label("Late window")).to_have_value("3d")
    assert _grade(page, klass, "onefour") == "8"

    page.goto(f"/assignments/{klass.slug}/settings")
    page.get_by_label("Late window").fill("1d")
    page.get_by_role("button", name="Save schedule").click()
    page.get_by_role("button", name="Save and change 1 student's grade").click()
    expect(page.locator("#saved")).to_have_text("Schedule saved.")
    expect(page.locator("#saved-change")).to_have_text("Late window: 3d → 1d (1 grade(s) changed).")
    expect(page.get_by_label("Late window")).to_have_value("1d")
    check_page(page)
    saved = page.url
    assert (_grade(page, klass, "onefour"), _grade(page, klass, "halfday")) == ("0", "9")

    page.goto(saved)
    page.get_by_role("button", name="Undo this change (shows what it does first)").click()
    expect(page.locator("#confirm-question")).to_contain_text("It changes 1 student's grade.")
    assert _preview_rows(page) == [[f"onefour-{klass.tag}", "0", "8",
                                    "late by 1 d 4 h: now 2 started day(s) after the grace x 10% = 20% off"]]
    check_page(page)
    page.get_by_role("button", name="Save and change 1 student's grade").click()
    expect(page.locator("#saved-change")).to_have_text("Late window: 1d → 3d (1 grade(s) changed).")
    expect(page.get_by_label("Late window")).to_have_value("3d")
    assert _grade(page, klass, "onefour") == "8"
