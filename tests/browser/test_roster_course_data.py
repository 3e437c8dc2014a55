"""In Chromium (issue 49): the roster import's confirmation page flags, one line per row, the
names that a spreadsheet would run as formulas, and names each student whose e-mail address for
the course's notices the file changes; the import is still allowed, keeps the name as written
and changes the course's address, never the account's own. The assignment settings page takes
the assignment's Canvas id (a bad one is refused beside its field, a Canvas address is read
for its number), and the course's Canvas CSV then titles the column `<title> (<id>)`."""
from __future__ import annotations

import csv
import io
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import enroll, get_or_create_user
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import Assignment, Course, CourseRole, Role, User
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import WorkerProcess

FORMULA = '=HYPERLINK("http://evil.example","Bo")'


@dataclass(frozen=True)
class Klass:
    course: str
    assignment: str
    prof: str
    ada: str  # a student already enrolled, her address from an earlier import


@pytest.fixture(scope="module")
def klass(sessions: sessionmaker[Session]) -> Klass:
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        course = Course(slug=f"rcd-{tag}", title="Roster data")
        session.add(Assignment(slug=f"rcd-{tag}-hw4", title="HW4: kernels", total_points=100, course=course))
        session.flush()
        set_password(get_or_create_user(session, f"rcd-prof-{tag}", Role.instructor, [course]), PASSWORD,
                     SUITE_ARGON2)
        ada = User(username=f"rcd-ada-{tag}", role=Role.student, email="ada@own.example")
        session.add(ada)
        session.flush()
        enroll(session, ada, course, CourseRole.student)
        entry = entry_of(session, ada.id, course.id)
        assert entry is not None
        entry.full_name, entry.section, entry.email = "Lovelace, Ada", "A", "ada@old.example"
    return Klass(f"rcd-{tag}", f"rcd-{tag}-hw4", f"rcd-prof-{tag}", f"rcd-ada-{tag}")


def test_the_confirmation_flags_formulas_and_names_each_e_mail_change(
        context: BrowserContext, sessions: sessionmaker[Session], klass: Klass, worker: WorkerProcess,
        screenshot_dir: Path) -> None:
    bo = klass.ada.replace("ada", "bo")
    quoted = '"' + FORMULA.replace('"', '""') + '"'
    roster = (f"login,name,email,section\n{klass.ada},\"Lovelace, Ada\",ada@new.example,A\n"
              f"{bo},{quoted},,B\n{bo.replace('bo', 'cy')},+Cy,,-B\n")
    page = log_in(context, klass.prof)
    page.goto(f"/roster?course={klass.course}")
    page.get_by_label("Or paste the CSV").fill(roster)
    page.get_by_role("button", name="Import students").click()

    expect(page.locator("#confirm-question")).to_have_text(
        f"Import 3 students into {klass.course}, each enrolled there as a student?")
    expect(page.locator("#roster-formulas-heading")).to_have_text(
        "2 lines have a cell that a spreadsheet would run as a formula. The import keeps it as written and every "
        "export writes it as text; you may want to fix the file first:")
    expect(page.locator("#roster-formulas li")).to_have_text([
        f"line 3 ({bo}): the name “{FORMULA}” starts with “=”",
        f"line 4 ({bo.replace('bo', 'cy')}): the name “+Cy” starts with “+”; the section “-B” starts with “-”"])
    expect(page.locator("#roster-email-changes-heading")).to_contain_text(
        f"The e-mail address that {klass.course}'s notices go to changes for 1 student")
    expect(page.locator("#roster-email-changes li")).to_have_text([f"{klass.ada}: ada@old.example → ada@new.example"])
    expect(page.locator("main")).to_contain_text(f"In {klass.course}, it changes 1 e-mail address of students "
                                                 "already enrolled.")
    page.screenshot(path=str(screenshot_dir / "roster-confirm-flags.png"), full_page=True)
    check_page(page)

    page.get_by_role("button", name="Import 3 students").click()  # flagged, and still allowed
    expect(page.locator("#roster-summary")).to_have_text("2 created, 1 updated, 0 unchanged, 0 line(s) with errors.",
                                                         timeout=120_000)
    with session_scope(sessions) as session:
        course_id = session.scalars(select(Course.id).where(Course.slug == klass.course)).one()
        ada = session.scalars(select(User).where(User.username == klass.ada)).one()
        bo_user = session.scalars(select(User).where(User.username == bo)).one()
        ada_entry, bo_entry = entry_of(session, ada.id, course_id), entry_of(session, bo_user.id, course_id)
        assert ada_entry is not None and bo_entry is not None
        assert (ada_entry.email, ada.email) == ("ada@new.example", "ada@own.example")  # the account's stays
        assert bo_entry.full_name == FORMULA  # as written


def test_the_settings_page_takes_the_canvas_id_and_the_canvas_csv_uses_it(
        context: BrowserContext, klass: Klass, screenshot_dir: Path) -> None:
    page = log_in(context, klass.prof)
    page.goto(f"/assignments/{klass.assignment}/settings")
    field = page.get_by_label("Canvas assignment id")
    field.fill("HW4")
    page.get_by_role("button", name="Save schedule").click()
    expect(page.locator("#e-canvas_id")).to_have_text(
        "“HW4” is not a Canvas assignment id: give the number at the end of the assignment's Canvas address "
        "(…/assignments/88123), or leave it empty")
    expect(page.get_by_label("Canvas assignment id")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Canvas assignment id")).to_have_value("HW4")  # as typed, to correct
    check_page(page)

    page.get_by_label("Canvas assignment id").fill("https://canvas.example.edu/courses/7/assignments/88123")
    page.get_by_role("button", name="Save schedule").click()
    expect(page.locator("#saved")).to_have_text("Schedule saved.")
    expect(page.get_by_label("Canvas assignment id")).to_have_value("88123")
    page.screenshot(path=str(screenshot_dir / "settings-canvas-id.png"), full_page=False)
    exported = page.request.get(f"/courses/{klass.course}/gradebook.csv")
    assert exported.ok
    assert list(csv.reader(io.StringIO(exported.text())))[0][5:] == ["HW4: kernels (88123)"]
