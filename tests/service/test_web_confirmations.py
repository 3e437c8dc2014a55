"""Mass and destructive staff actions go through a confirmation page (issue 18): the gradebook's
bulk re-grade (of exactly the rows its filters select, the count and the filters named), a
member's removal, an extension's removal, a roster import and pausing grading. A POST without the confirmation's field goes to that page
and changes nothing; a confirmation of another set of submissions is asked again."""
from __future__ import annotations

import html
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import enroll, role_in
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import (
    Assignment,
    CourseRole,
    Extension,
    Role,
    RosterJob,
    Run,
    RunState,
    Submission,
    User,
    utcnow,
)
from grader.models import Course as CourseRow
from grader.passwords import set_password
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_settings import PASSWORD, Browser

CONFIRM_FORM = re.compile(r'<form method="post" action="([^"]+)" id="confirm-form">(.*?)</form>', re.S)
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def confirm_form(html: str) -> tuple[str, dict[str, list[str]]]:
    """The confirmation page's form: its action and fields (the CSRF token among them)."""
    found = CONFIRM_FORM.search(html)
    assert found, "no confirmation form on the page"
    fields: dict[str, list[str]] = {}
    for name, value in HIDDEN.findall(found.group(2)):
        fields.setdefault(name, []).append(value.replace("&amp;", "&").replace("&#34;", '"'))
    return found.group(1), fields


def confirmed(browser: Browser, path: str, data: dict[str, Any]) -> tuple[str, Any]:
    """POST `data` to `path` as the first form does (it lands on the confirmation page, 303),
    then press the confirmation's button: (the confirmation page, the final answer)."""
    asked = browser.client.post(path, data=data, follow_redirects=False)
    assert asked.status_code == 303, asked.text
    page = browser.client.get(asked.headers["location"])
    assert page.status_code == 200, page.text
    action, fields = confirm_form(page.text)
    return page.text, browser.client.post(action, data=fields, follow_redirects=False)


@dataclass
class Course:
    slug: str
    tag: str
    subs: dict[str, list[int]]  # short name -> submission ids, oldest first

    def login(self, short: str) -> str:
        return f"{self.tag}-{short}"


def _submission(session: Session, user: User, assignment: Assignment, score: float | None) -> int:
    sub = Submission(user=user, assignment=assignment, original_filename="hw.zip", size_bytes=1,
                     sha256=uuid.uuid4().hex * 2)
    session.add(sub)
    if score is not None:
        session.add(Run(submission=sub, state=RunState.scored, score=score, finished_at=utcnow()))
    session.flush()
    return sub.id


@pytest.fixture(scope="module")
def course(sessions: sessionmaker[Session]) -> Course:
    """Sections A (amy 90, ava 40 with a newer upload not yet graded) and B (ben 70, two
    uploads, both graded), and the staff member."""
    tag = f"cf{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        assignment = Assignment(slug=f"cf-{tag}", title="Confirmations", course=CourseRow(slug=f"cf-{tag}", title="Confirmations"), total_points=100)
        session.add(assignment)
        session.flush()
        staff = User(username=f"{tag}-prof", role=Role.instructor)
        set_password(staff, PASSWORD, SUITE_ARGON2)
        session.add(staff)
        session.flush()
        enroll(session, staff, assignment.course, CourseRole.instructor)
        subs: dict[str, list[int]] = {}
        for short, section, scores in (("amy", "A", [90.0]), ("ava", "A", [40.0, None]), ("ben", "B", [60.0, 70.0])):
            user = User(username=f"{tag}-{short}", role=Role.student)
            session.add(user)
            session.flush()
            enroll(session, user, assignment.course, CourseRole.student)
            entry = entry_of(session, user.id, assignment.course.id)
            assert entry is not None
            entry.section = section
            subs[short] = [_submission(session, user, assignment, s) for s in scores]
        return Course(assignment.slug, tag, subs)


@pytest.fixture(scope="module")
def prof(settings: Settings, course: Course) -> Browser:
    return Browser(settings, course.login("prof"))


def _run_count(sessions: sessionmaker[Session], course: Course) -> int:
    with session_scope(sessions) as session:
        return session.scalar(select(func.count(Run.id)).join(Submission).join(Assignment)
                              .where(Assignment.slug == course.slug)) or 0


def _regrade_runs(sessions: sessionmaker[Session], course: Course) -> list[int]:
    with session_scope(sessions) as session:
        return sorted(session.scalars(select(Run.submission_id).join(Submission).join(Assignment)
                                      .where(Assignment.slug == course.slug, Run.reason == "regrade")))


def test_bulk_regrade_confirms_the_filtered_rows_and_queues_exactly_them(
        prof: Browser, course: Course, sessions: sessionmaker[Session]) -> None:
    before = _run_count(sessions, course)
    query = {"assignment": course.slug, "section": "A"}
    page = prof.client.get("/gradebook/regrade", params={**query, "which": "all"})
    assert page.status_code == 200
    assert "Re-grade 3 submissions of 2 students matching section A? This queues 3 runs." in page.text
    newest = prof.client.get("/gradebook/regrade", params={**query, "min_score": "50", "which": "latest"})
    assert ("Re-grade 1 newest submission of 1 student matching section A, final score at least 50? "
            "This queues 1 run.") in newest.text
    assert _run_count(sessions, course) == before  # showing the confirmation changed nothing

    token = prof.page_csrf(f"/gradebook?assignment={course.slug}")
    shown, done = confirmed(prof, "/gradebook/regrade", {"csrf_token": token, **query, "which": "latest"})
    assert "Re-grade 2 newest submissions of 2 students matching section A?" in shown
    back = done.headers["location"]
    assert done.status_code == 303 and "section=A" in back and back.endswith("&queued=2")
    assert _regrade_runs(sessions, course) == sorted([course.subs["amy"][-1], course.subs["ava"][-1]])
    notice = prof.client.get(back).text
    assert "2 re-grade runs queued." in notice and "of the 2 students shown" in notice


def test_a_post_without_the_confirmation_changes_nothing(prof: Browser, course: Course,
                                                         sessions: sessionmaker[Session]) -> None:
    before = _run_count(sessions, course)
    token = prof.page_csrf(f"/gradebook?assignment={course.slug}")
    data = {"csrf_token": token, "assignment": course.slug, "section": "B", "which": "all"}
    asked = prof.client.post("/gradebook/regrade", data=data, follow_redirects=False)
    assert asked.status_code == 303 and asked.headers["location"].startswith("/gradebook/regrade?")
    assert "csrf_token" not in asked.headers["location"]
    stale = prof.client.post("/gradebook/regrade", data={**data, "expect": "0" * 20}, follow_redirects=False)
    assert stale.status_code == 409 and "changed since the confirmation" in stale.text
    assert "Re-grade 2 submissions of 1 student matching section B?" in stale.text
    # A ticked row outside the filtered rows (amy is in section A): refused, as absent.
    ticked = prof.client.get("/gradebook/regrade", params={"assignment": course.slug, "section": "B",
                                                          "which": "selected", "submission": course.subs["amy"][0]})
    assert ticked.status_code == 404
    nothing = prof.client.get("/gradebook/regrade", params={"assignment": course.slug, "which": "selected"})
    assert nothing.status_code == 400 and "Tick at least one" in nothing.text
    assert _run_count(sessions, course) == before


def test_row_regrade_names_the_graded_and_the_newest_submission(prof: Browser, course: Course) -> None:
    html = prof.client.get("/gradebook", params={"assignment": course.slug}).text
    graded, newer = course.subs["ava"]
    assert f">Re-grade submission {graded} (graded)</button>" in html
    assert f">Re-grade submission {newer} (newest)</button>" in html
    assert f'action="/submissions/{newer}/regrade"' in html
    amy = course.subs["amy"][0]  # graded is the newest: one button
    assert html.count(f">Re-grade submission {amy} (graded)</button>") == 1 and f"{amy} (newest)<" not in html


def test_member_removal_is_confirmed(prof: Browser, course: Course, sessions: sessionmaker[Session]) -> None:
    members = f"/courses/{course.slug}/members"  # the course has the assignment's slug
    ben = course.login("ben")
    token = prof.page_csrf(members)
    asked = prof.client.post(f"{members}/{ben}/remove", data={"csrf_token": token}, follow_redirects=False)
    assert asked.status_code == 303 and asked.headers["location"] == f"{members}/{ben}/remove"

    def part() -> object:
        with session_scope(sessions) as session:
            user = session.scalar(select(User).where(User.username == ben))
            assignment = session.scalar(select(Assignment).where(Assignment.slug == course.slug))
            assert user and assignment
            return role_in(session, user.id, assignment.id)
    assert part() is not None  # not removed without the confirmation
    shown, done = confirmed(prof, f"{members}/{ben}/remove", {"csrf_token": token})
    assert f"Remove {ben} (student, section B) from {course.slug}?" in shown
    assert "Their 2 submissions and grades stay on record" in shown
    assert done.status_code == 303 and part() is None
    gone = prof.client.get(f"{members}/{ben}/remove").text
    assert "is not a member" in gone and 'id="confirm-form"' not in gone


def test_pause_is_confirmed(prof: Browser, course: Course, sessions: sessionmaker[Session]) -> None:
    grading = f"/assignments/{course.slug}/grading"

    def paused() -> bool:
        with session_scope(sessions) as session:
            return bool(session.scalar(select(Assignment.grading_paused).where(Assignment.slug == course.slug)))
    token = prof.page_csrf(grading)
    asked = prof.client.post(grading, data={"csrf_token": token, "action": "pause"}, follow_redirects=False)
    assert asked.status_code == 303 and asked.headers["location"] == f"{grading}/pause" and not paused()
    shown, done = confirmed(prof, grading, {"csrf_token": token, "action": "pause"})
    assert f"Pause grading of {course.slug}? Nothing more of it is sent to the workers." in shown
    assert done.status_code == 303 and paused()
    assert "already paused" in prof.client.get(f"{grading}/pause").text


def _extension_of(sessions: sessionmaker[Session], course: Course, short: str) -> int | None:
    with session_scope(sessions) as session:
        return session.scalar(select(Extension.extra_s).join(User, User.id == Extension.user_id)
                              .join(Assignment, Assignment.id == Extension.assignment_id)
                              .where(User.username == course.login(short), Assignment.slug == course.slug))


def test_extension_removal_is_confirmed(prof: Browser, course: Course, sessions: sessionmaker[Session]) -> None:
    settings_page, amy = f"/assignments/{course.slug}/settings", course.login("amy")
    with session_scope(sessions) as session:
        assignment = session.scalars(select(Assignment).where(Assignment.slug == course.slug)).one()
        assignment.due_at = datetime(2026, 3, 19, 23, 59, 59, tzinfo=UTC)  # the tests' course zone is UTC
    token = prof.page_csrf(settings_page)
    granted = prof.client.post(f"/assignments/{course.slug}/extensions", follow_redirects=False,
                               data={"csrf_token": token, "student": amy, "extra": "2d", "reason": "conference"})
    assert granted.status_code == 303 and _extension_of(sessions, course, "amy") == 2 * 86400
    removal = f"/assignments/{course.slug}/extensions/{amy}/remove"
    asked = prof.client.post(removal, data={"csrf_token": token}, follow_redirects=False)
    assert asked.status_code == 303 and asked.headers["location"] == removal
    zero = prof.client.post(f"/assignments/{course.slug}/extensions", follow_redirects=False,
                            data={"csrf_token": token, "student": amy, "extra": "0"})  # the form's other way
    assert zero.status_code == 303 and zero.headers["location"] == removal
    assert _extension_of(sessions, course, "amy") == 2 * 86400  # nothing removed without the confirmation

    escaped, done = confirmed(prof, removal, {"csrf_token": token})
    shown = html.unescape(escaped)
    assert f"Remove {amy}'s extension of 2d (“conference”) on {course.slug}?" in shown
    assert "goes back from 2026-03-21 23:59:59 to the assignment's 2026-03-19 23:59:59" in shown
    assert "those already made included" in shown
    assert done.status_code == 303 and _extension_of(sessions, course, "amy") is None
    gone = prof.client.get(removal).text
    assert "has no extension" in gone and 'id="confirm-form"' not in gone
    with session_scope(sessions) as session:
        session.scalars(select(Assignment).where(Assignment.slug == course.slug)).one().due_at = None


def _jobs_of(sessions: sessionmaker[Session], login: str) -> list[RosterJob]:
    with session_scope(sessions) as session:
        rows = list(session.scalars(select(RosterJob).join(User, User.id == RosterJob.requested_by)
                                    .where(User.username == login).order_by(RosterJob.id)))
        session.expunge_all()
        return rows


def test_roster_import_is_confirmed(prof: Browser, course: Course, sessions: sessionmaker[Session]) -> None:
    """The file's students counted (new accounts, existing ones, skipped lines) before anything is
    created; the confirmation's button sends the same roster, which then becomes the import job."""
    newcomer, amy = course.login("new"), course.login("amy")
    roster = f"login,name,section\n{newcomer},Nora O'Neil,A\n{amy},Amy,A\n,Nobody,A\n{course.login('prof')},Prof,A\n"
    token = prof.page_csrf("/roster")
    shown = prof.client.post("/roster", data={"csrf_token": token, "course": course.slug},
                             files={"file": ("class.csv", roster.encode(), "text/csv")}, follow_redirects=False)
    assert shown.status_code == 200, shown.text
    text = html.unescape(shown.text)
    assert f"Import 2 students into {course.slug}, each enrolled there as a student?" in text
    assert "1 new account: each gets a first password" in text
    assert ("1 student already has an account: it stays as it is (login, password, own e-mail address, other "
            f"courses); what {course.slug} shows of them becomes the file's") in text
    assert f"In {course.slug}, it changes 1 name of students already enrolled." in text  # amy's section stays A
    assert (f"2 lines cannot be imported and are skipped: line 4: the login is empty; line 5: {course.login('prof')} "
            "is an existing instructor account; not changed.") in text
    assert _jobs_of(sessions, course.login("prof")) == []  # nothing started before the button
    with session_scope(sessions) as session:
        assert session.scalar(select(User).where(User.username == newcomer)) is None

    found = CONFIRM_FORM.search(shown.text)
    assert found and found.group(1) == "/roster"
    fields = {name: html.unescape(value) for name, value in HIDDEN.findall(found.group(2))}
    assert fields["text"] == roster and (fields["course"], fields["confirm"]) == (course.slug, "import")
    started = prof.client.post("/roster", data=fields, follow_redirects=False)
    assert started.status_code == 303 and started.headers["location"] == "/roster", started.text
    [job] = _jobs_of(sessions, course.login("prof"))
    assert job.roster in (roster, None)  # None: a worker of this test session has taken it already

    nothing = prof.client.post("/roster", data={"csrf_token": token, "course": course.slug,
                                                "text": ",Nobody\n"})
    assert nothing.status_code == 200 and 'id="confirm-form"' not in nothing.text
    assert f"No line of this roster can be imported into {course.slug}." in html.unescape(nothing.text)
