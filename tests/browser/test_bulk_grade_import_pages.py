"""The bulk grade import (issue 51: an outage leaves hundreds of manual grades to give), in
Chromium: from the gradebook's link, a file with a bad line is previewed with that line's number
and why and nothing applies; the corrected file's preview shows each student's grade before and
after, and its button applies every entry, which the gradebook then shows."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, GradeAdjustment, Role
from grader.models import Course as CourseRow
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.browser.test_staff_workflow_pages import PASSWORD, log_in, scored_run
from tests.fixtures.passwords import SUITE_ARGON2


@dataclass
class Course:
    slug: str
    prof: str
    student: str  # a scored run of 60
    other: str  # no run: the outage


@pytest.fixture
def course(sessions: sessionmaker[Session]) -> Iterator[Course]:
    tag = uuid.uuid4().hex[:6]
    slug = f"bulkb-{tag}"
    with session_scope(sessions) as session:
        session.add(Assignment(slug=slug, title=f"Bulk {tag}", course=CourseRow(slug=slug, title=f"Bulk {tag}"),
                               total_points=100))
        session.flush()  # created first: new accounts join every assignment there is
        users = [get_or_create_user(session, f"bulkb-{who}-{tag}", role) for who, role in
                 (("prof", Role.instructor), ("stu", Role.student), ("oth", Role.student))]
        for user in users:
            set_password(user, PASSWORD, SUITE_ARGON2)
        names = [u.username for u in users]
    yield Course(slug, *names)


def _entries(sessions: sessionmaker[Session], slug: str) -> list[tuple[str, float | None]]:
    with session_scope(sessions) as session:
        return [(kind, points) for kind, points in session.execute(
            select(GradeAdjustment.kind, GradeAdjustment.points).join(Assignment)
            .where(Assignment.slug == slug).order_by(GradeAdjustment.id))]


def test_a_bad_line_is_named_and_the_corrected_file_applies(browser: Browser, base_url: str, course: Course,
                                                            sessions: sessionmaker[Session]) -> None:
    scored_run(sessions, course, 60.0)  # type: ignore[arg-type]  # the same fields as that test's Course
    page = log_in(browser, base_url, course.prof)
    page.goto(f"/gradebook?assignment={course.slug}")
    page.get_by_role("link", name="Import manual grades and adjustments (CSV)").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(course.slug)

    header = "login,kind,points,reason\n"
    bad = (f"{header}{course.student},adjust,4,Problem 3 checked by hand\n"
           f"{course.other},manual,150,Graded by hand\n")
    page.get_by_label("Grades file (.csv)").set_input_files(
        files=[{"name": "grades.csv", "mimeType": "text/csv", "buffer": bad.encode()}])
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#import-refused")).to_contain_text("1 line cannot be applied, so nothing is")
    expect(page.locator("#import-errors")).to_have_text("Line 3: A manual grade is from 0 to 100 points, "
                                                        "the assignment's total.")
    expect(page.locator("#import-confirm")).to_have_count(0)
    assert _entries(sessions, course.slug) == []
    check_page(page)

    fixed = bad.replace("manual,150,", "manual,85,")
    page.get_by_label("Corrected file (.csv)").set_input_files(
        files=[{"name": "grades-fixed.csv", "mimeType": "text/csv", "buffer": fixed.encode()}])
    page.get_by_role("button", name="Preview").click()
    rows = page.locator("#import-effects tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("td")).to_have_text(["2", course.student, "adjust", "4", "Problem 3 checked by hand",
                                                     "60", "64"])
    expect(rows.nth(1).locator("td")).to_have_text(["3", course.other, "manual", "85", "Graded by hand", "none", "85"])
    expect(page.locator("#import-errors")).to_have_count(0)
    assert _entries(sessions, course.slug) == []  # a preview applies nothing
    check_page(page)

    page.get_by_role("button", name="Apply 2 entries").click()
    expect(page.locator("#import-applied")).to_contain_text("2 entries applied.")
    assert _entries(sessions, course.slug) == [("adjust", 4.0), ("manual", 85.0)]
    page.get_by_role("link", name="Back to the gradebook").first.click()
    for login, grade in ((course.student, "64"), (course.other, "85")):
        row = page.locator("tr", has=page.locator(f'th[scope="row"]:text-is("{login}")'))
        expect(row.locator(".final-grade")).to_have_text(grade)
