"""In Chromium: a bulk re-grade of the gradebook's filtered rows and a member's removal each go
through a confirmation page that says what will happen (and passes the accessibility checks);
only its button acts, its cancel link changes nothing (issue 18)."""
from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import BrowserContext, expect
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import Assignment, Course, Role, Run, RunState, Submission, utcnow
from grader.passwords import set_password
from tests.browser.a11y import check_page
from tests.browser.test_pages import PASSWORD, log_in
from tests.fixtures.passwords import SUITE_ARGON2

SLUG = "confirm-course"
PROF = "cfb-prof"
SECTIONS = {"cfb-ida": "A", "cfb-jon": "B", "cfb-kim": "B"}


@pytest.fixture(scope="module")
def newest(sessions: sessionmaker[Session]) -> dict[str, int]:
    """A course of its own (nobody else's gradebook changes): three students, each with an
    older scored upload and a newer one; the newest submission id of each."""
    out: dict[str, int] = {}
    with session_scope(sessions) as session:
        assignment = Assignment(slug=SLUG, title="Confirmation course", course=Course(slug=SLUG, title="Confirmation course"), total_points=100)
        session.add(assignment)
        session.flush()
        set_password(get_or_create_user(session, PROF, Role.instructor, [assignment.course]), PASSWORD, SUITE_ARGON2)
        for name, section in SECTIONS.items():
            user = get_or_create_user(session, name, Role.student, [assignment.course])
            entry = entry_of(session, user.id, assignment.course_id)
            assert entry is not None
            entry.section = section
            for score in (50.0, None):
                sub = Submission(user=user, assignment=assignment, original_filename="hw.zip", size_bytes=1,
                                 sha256=uuid.uuid4().hex * 2)
                session.add(sub)
                if score is not None:
                    session.add(Run(submission=sub, state=RunState.scored, score=score, finished_at=utcnow()))
                session.flush()
                out[name] = sub.id
    return out


def _regraded(sessions: sessionmaker[Session]) -> list[int]:
    with session_scope(sessions) as session:
        return sorted(session.scalars(select(Run.submission_id).join(Submission).join(Assignment)
                                      .where(Assignment.slug == SLUG, Run.reason == "regrade")))


def test_filtered_bulk_regrade_is_confirmed(context: BrowserContext, sessions: sessionmaker[Session],
                                           newest: dict[str, int]) -> None:
    page = log_in(context, PROF)
    page.goto(f"/gradebook?assignment={SLUG}")
    page.get_by_label("Section").select_option("B")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#shown")).to_contain_text("Students 1–2 of 2")
    page.get_by_role("button", name="Re-grade the newest submission of the 2 students shown").click()
    expect(page.locator("#confirm-question")).to_have_text(
        "Re-grade 2 newest submissions of 2 students matching section B? This queues 2 runs.")
    check_page(page)
    assert _regraded(sessions) == []  # nothing queued before the confirmation's button
    page.get_by_role("button", name="Queue 2 re-grade runs").click()
    expect(page.locator("#regrade-notice")).to_have_text("2 re-grade runs queued.")
    assert "section=B" in page.url  # back to the same filtered view
    assert _regraded(sessions) == sorted([newest["cfb-jon"], newest["cfb-kim"]])


def test_member_removal_is_confirmed(context: BrowserContext, newest: dict[str, int]) -> None:
    page = log_in(context, PROF)
    page.goto(f"/courses/{SLUG}/members")  # the course has the assignment's slug
    remove = page.get_by_role("button", name=f"Remove cfb-ida from {SLUG} (asks to confirm)")
    remove.click()
    expect(page.locator("#confirm-question")).to_have_text(f"Remove cfb-ida (student, section A) from {SLUG}?")
    expect(page.locator("main")).to_contain_text("Their 2 submissions and grades stay on record")
    check_page(page)
    page.get_by_role("link", name="Cancel: Keep them, back to the members").click()
    expect(page.locator("#members")).to_contain_text("cfb-ida")  # cancelled: still a member
    remove.click()
    page.get_by_role("button", name="Remove cfb-ida").click()
    expect(page.locator("#members")).to_be_visible()
    expect(page.locator("#members")).not_to_contain_text("cfb-ida")
