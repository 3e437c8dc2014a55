"""Accounts in Chromium (issue 49), for an instructor and a TA of two courses: the TA finds both
courses on their account page, sets their own e-mail there (with their password) and turns
their staff mail off; the instructor sees that address on each course's members page, read
only (the account is the TA's), and re-issues each course's first logins: a CSV download with a
link for every student nobody has used, and none for a student that another course holds.
Every page passes the accessibility checks (tests/browser/a11y.py)."""
from __future__ import annotations

import csv
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.courses import create_course
from grader.course.membership import enroll, get_or_create_user
from grader.db import session_scope
from grader.models import CourseRole, Role, User
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2


@dataclass
class Two:
    courses: tuple[str, str]
    prof: str
    ta: str
    students: dict[str, str]  # who -> login: a1, a2 (course one), b1 (course two), shared (one and elsewhere)


@pytest.fixture
def two(sessions: sessionmaker[Session]) -> Two:
    tag = uuid.uuid4().hex[:6]
    courses = (f"acc-one-{tag}", f"acc-two-{tag}")
    students = {who: f"acc-{who}-{tag}" for who in ("a1", "a2", "b1", "shared")}
    with session_scope(sessions) as session:
        one, other, elsewhere = (create_course(session, slug, f"Course {slug}")
                                 for slug in (*courses, f"acc-else-{tag}"))
        prof = get_or_create_user(session, f"acc-prof-{tag}", Role.instructor, [])
        ta = get_or_create_user(session, f"acc-ta-{tag}", Role.student, [])
        for user in (prof, ta):
            set_password(user, PASSWORD, SUITE_ARGON2)
        for course in (one, other):
            enroll(session, prof, course, CourseRole.instructor)
            enroll(session, ta, course, CourseRole.ta)
        for who, login in students.items():
            user = get_or_create_user(session, login, Role.student, [])
            for course in {"a1": [one], "a2": [one], "b1": [other], "shared": [one, elsewhere]}[who]:
                enroll(session, user, course, CourseRole.student)
        return Two(courses, prof.username, ta.username, students)


def _downloaded_rows(page, button: str) -> dict[str, dict[str, str]]:  # type: ignore[no-untyped-def]
    with page.expect_download() as download:
        page.get_by_role("button", name=button).click()
    assert download.value.suggested_filename.startswith("first-logins-")
    with Path(download.value.path()).open(newline="") as fh:
        return {row["login"]: row for row in csv.DictReader(fh)}


def test_a_ta_of_two_courses_owns_their_e_mail_and_the_instructor_reissues_first_logins(
        context: BrowserContext, browser, base_url: str, two: Two, sessions: sessionmaker[Session],
        screenshot_dir: Path) -> None:
    ta = log_in(context, two.ta)
    ta.get_by_role("navigation", name="Main").get_by_role("link", name="Account").click()
    expect(ta.get_by_role("heading", level=1)).to_have_text("Your account")
    for slug in two.courses:
        expect(ta.locator("#account-courses")).to_contain_text(f"{slug} (Course {slug})")
    expect(ta.locator("#account-courses tbody tr").filter(has_text=two.courses[0])).to_contain_text("TA")
    ta.get_by_label("E-mail address").fill("ta.mail@uni.example.edu")
    ta.get_by_label("Current password").fill("not my password")
    ta.get_by_role("button", name="Save the e-mail").click()
    expect(ta.locator("#account-error")).to_have_text("Your current password is not right; the e-mail is unchanged.")
    ta.get_by_label("E-mail address").fill("ta.mail@uni.example.edu")
    ta.get_by_label("Current password").fill(PASSWORD)
    ta.get_by_role("button", name="Save the e-mail").click()
    expect(ta.locator("#account-saved")).to_have_text("E-mail saved.")
    expect(ta.locator("#account-email")).to_have_text("ta.mail@uni.example.edu")
    ta.get_by_label("E-mail me about the courses I am staff of").uncheck()
    ta.get_by_role("button", name="Save the staff mail").click()
    expect(ta.locator("#account-saved")).to_have_text("Staff mail saved.")
    expect(ta.get_by_label("E-mail me about the courses I am staff of")).not_to_be_checked()
    check_page(ta)
    ta.screenshot(path=str(screenshot_dir / "account.png"), full_page=True)
    with session_scope(sessions) as session:
        saved = session.scalars(select(User).where(User.username == two.ta)).one()
        assert (saved.email, saved.staff_mail) == ("ta.mail@uni.example.edu", False)

    prof_context = browser.new_context(base_url=base_url, viewport={"width": 1100, "height": 800},
                                       accept_downloads=True)
    prof = log_in(prof_context, two.prof)
    wanted = {two.courses[0]: {"a1": "link", "a2": "link", "shared": "no link"}, two.courses[1]: {"b1": "link"}}
    for slug, links in wanted.items():
        prof.goto(f"/courses/{slug}/members")
        ta_row = prof.locator("#members tbody tr").filter(has_text=two.ta)
        expect(ta_row.locator(".member-email")).to_have_text("ta.mail@uni.example.edu")  # the TA's: read only
        expect(ta_row.get_by_role("textbox")).to_have_count(0)
        expect(ta_row.get_by_role("button", name=f"Issue a first-login link for {two.ta}")).to_have_count(0)
        shared_rows = prof.locator("#members tbody tr").filter(has_text=two.students["shared"])
        expect(shared_rows.get_by_role("button", name="First-login link")).to_have_count(0)
        expect(prof.locator("#first-logins-count")).to_contain_text(f"{len(links)} account")
        check_page(prof)
        rows = _downloaded_rows(prof, "Re-issue the first logins (CSV)")
        assert set(rows) == {two.students[who] for who in links}, rows
        for who, what in links.items():
            row = rows[two.students[who]]
            if what == "link":
                assert row["link"].startswith("/reset/") and row["note"] == "the link is in this file", row
            else:
                assert row["link"] == "" and "also enrolled in a course you do not instruct" in row["note"], row
    prof.goto(f"/courses/{two.courses[0]}/members")
    prof.screenshot(path=str(screenshot_dir / "members-first-logins.png"), full_page=True)
    prof_context.close()
