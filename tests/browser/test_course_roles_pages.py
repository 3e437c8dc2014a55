"""A course and its roles in Chromium (issue 30): an instructor makes a course, adds two of the
service's assignments to it, then a TA and two students on its members page; the TA lands on
the gradebook with the staff's navigation (not the students' upload pages), re-grades a
student's submission, and is refused a policy change with a 403 page that says who may. Every
page passes the accessibility checks (tests/browser/a11y.py)."""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Role, Run, RunState, Submission, utcnow
from grader.passwords import set_password
from grader.service import record_submission
from grader.storage.blobstore import StoredBlob
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2


@dataclass
class Semester:
    course: str  # the short name the instructor gives the course
    assignments: tuple[str, str]
    prof: str
    ta: str
    students: tuple[str, str]


@pytest.fixture
def semester(sessions: sessionmaker[Session]) -> Iterator[Semester]:
    """Two assignments of the service that no course holds yet (paused: a re-grade is stored
    and queued, never sent to a worker), an account that may make courses, and accounts in no
    course yet for the TA and the students."""
    tag = uuid.uuid4().hex[:6]
    slugs = (f"sem-a-{tag}", f"sem-b-{tag}")
    names = {key: f"sem-{key}-{tag}" for key in ("prof", "ta", "ann", "bob")}
    with session_scope(sessions) as session:
        for slug in slugs:
            session.add(Assignment(slug=slug, title=f"Kernels {slug[-8:]}", total_points=100, grading_paused=True))
        for key, name in names.items():
            set_password(get_or_create_user(session, name, Role.instructor if key == "prof" else Role.student, []),
                         PASSWORD, SUITE_ARGON2)
    yield Semester(f"sem-{tag}", slugs, names["prof"], names["ta"], (names["ann"], names["bob"]))


def _scored_upload(sessions: sessionmaker[Session], student: str, slug: str) -> int:
    """A scored run of the student's in `slug`, as a worker records one: its submission's id."""
    with session_scope(sessions) as session:
        user = get_or_create_user(session, student, Role.student)
        assignment = session.scalars(select(Assignment).where(Assignment.slug == slug)).one()
        sub, run = record_submission(session, user, assignment, "hw.zip", StoredBlob(uuid.uuid4().hex * 2, 10))
        run.state, run.score, run.finished_at = RunState.scored, 71.5, utcnow()
        return sub.id


def _runs_of(sessions: sessionmaker[Session], submission: int) -> int:
    with session_scope(sessions) as session:
        return session.scalar(select(func.count(Run.id)).join(Submission).where(Submission.id == submission)) or 0


def test_an_instructor_makes_a_course_and_its_ta_grades_but_changes_no_policy(
        context: BrowserContext, browser, base_url: str, semester: Semester, sessions: sessionmaker[Session],
        screenshot_dir: Path) -> None:
    first, second = semester.assignments
    page = log_in(context, semester.prof)
    expect(page).to_have_url(re.compile(r"/courses$"))  # in no course yet: where courses are made
    expect(page.locator("#no-courses")).to_be_visible()
    page.get_by_label("Short name").fill(semester.course)
    page.get_by_label("Title").fill("LLM Systems, fall 2026")
    page.get_by_role("button", name="Make the course").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("LLM Systems, fall 2026")
    expect(page.locator("#no-assignments")).to_be_visible()
    for slug in (first, second):
        page.get_by_label("Assignment", exact=True).select_option(slug)
        page.get_by_role("button", name=f"Add to {semester.course}").click()
        expect(page.locator("#added")).to_have_text(f"{slug} is now an assignment of {semester.course}.")
    expect(page.locator("#assignments tbody tr")).to_have_count(2)
    check_page(page)

    page.get_by_role("link", name="Members").click()
    for name, part in ((semester.ta, "TA"), *((s, "student") for s in semester.students)):
        page.get_by_label("Username").fill(name)
        page.get_by_label("Part", exact=True).select_option(label=part)
        page.get_by_role("button", name="Save").click()
        expect(page.locator("#saved")).to_contain_text(name)
        expect(page.locator("#members tbody tr").filter(has_text=name).locator("td").first).to_have_text(part)
    check_page(page)
    page.get_by_role("link", name="Course page").click()
    expect(page.locator("#course-people")).to_contain_text(f"2 students; staff: {semester.prof} (instructor), "
                                                           f"{semester.ta} (TA).")
    page.screenshot(path=str(screenshot_dir / "course.png"), full_page=True)

    submission = _scored_upload(sessions, semester.students[0], first)  # a student's graded upload
    ta_context = browser.new_context(base_url=base_url, viewport={"width": 1100, "height": 800})
    ta = log_in(ta_context, semester.ta)
    expect(ta).to_have_url(re.compile(r"/gradebook$"))  # staff land on the gradebook, not the upload page
    nav = ta.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Gradebook")).to_be_visible()
    expect(nav.get_by_role("link", name="Submit")).to_have_count(0)  # a TA is no student here
    expect(nav.get_by_role("link", name="Roster")).to_have_count(0)  # nor an instructor
    expect(nav).to_contain_text(f"{semester.ta} (TA)")
    ta.goto(f"/gradebook?assignment={first}")
    row = ta.locator("#gradebook tbody tr").filter(has_text=semester.students[0])
    expect(row).to_contain_text("71.5")
    check_page(ta)
    before = _runs_of(sessions, submission)
    row.get_by_role("button", name=f"Re-grade {semester.students[0]}'s submission {submission} (the graded one)").click()
    expect(ta).to_have_url(re.compile(r"/runs/\d+$"))  # the new run's page
    assert _runs_of(sessions, submission) == before + 1

    ta.goto(f"/assignments/{first}/regrade-requests")  # the staff pages a TA may use, and no other
    ops = ta.get_by_role("navigation", name=f"Course operations for {first}")
    expect(ops.get_by_role("link", name="Regrade requests")).to_be_visible()
    expect(ops.get_by_role("link", name="Settings and extensions")).to_have_count(0)
    refused = ta.goto(f"/assignments/{first}/settings")
    assert refused is not None and refused.status == 403
    expect(ta.get_by_role("heading", level=1)).to_have_text("Not allowed")
    expect(ta.get_by_role("alert")).to_have_text(
        f"Only the course's instructors, and the TAs they allow, change the schedule in {semester.course}; you are "
        "a TA there. An instructor of the course may grant its TAs this on the course's page.")
    check_page(ta)
    ta.screenshot(path=str(screenshot_dir / "ta-refused.png"), full_page=True)
    # The settings form itself, sent with the TA's session and CSRF token, is refused the same way
    token = ta.locator("input[name=csrf_token]").first.get_attribute("value")
    sent = ta_context.request.post(f"/assignments/{first}/settings", headers={"Origin": base_url},
                                   form={"csrf_token": token or "", "due": "2030-01-01T00:00:00"})
    assert sent.status == 403 and "you are a TA there" in sent.text()
    with session_scope(sessions) as session:
        assert session.scalars(select(Assignment.due_at).where(Assignment.slug == first)).one() is None
    ta_context.close()
