"""What one course's staff set up of an account nobody has used yet stops opening it once another
course holds it too (grader.auth.set_up), on PostgreSQL through the real pages, the roster
import's worker, the operator's command and a real SMTP server. On the code before this rule
each test fails at its first refusal (a 303 login, a 200 link page).

The chain (issue 49, after its first three): B's instructor imports a roster that makes the
account `alice` (her first password in B's download, B's address on the account) and gives her
a first-login link. A's roster then names alice, which enrolls her in A and changes nothing of
the account, and A's staff may give her no link. As alice, B's instructor would read and submit
in A: by logging in with the first password, by the link, or by /forgot mailing B's address.
Each is refused with a sentence naming who can, and recorded; both members pages say what to
do. A site administrator's address and link work, and once alice has used the account it is
hers as before. What the operator or a site administrator set up is no course's and works.
"""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.cli.main import app as grader_cli
from grader.course.courses import find_course
from grader.course.membership import enroll, get_or_create_user
from grader.db import session_scope
from grader.models import AuditEvent, CourseRole, PasswordReset, Role, User
from grader.settings import Settings, SmtpSettings
from tests.service.conftest import WorkerProcess
from tests.service.test_account_ownership import Semester, semester  # noqa: F401 (fixture)
from tests.service.test_capacity_cli import cli  # noqa: F401 (fixture)
from tests.service.test_notify_mail import PUBLIC_URL, SENDER, Mailbox, mailbox  # noqa: F401 (fixture)
from tests.service.test_web_roster import _imported
from tests.service.test_web_settings import Browser

LINK = re.compile(r'<code id="reset-link">([^<]+)</code>')
SHUT = "nobody has used it yet and another course holds it too, so that first password or link no longer opens it."
WHO_CAN = "a site administrator gives them a first-login link."
SHUT_HERE = "never used; set up by this course, but another holds it too: a site administrator gives the first login"
SHUT_THERE = "never used; set up by another course: a site administrator gives the first login"
OWN_PASSWORD = "alice's very own password"


@dataclass(frozen=True)
class Account:
    """What the tests compare of an account before and after."""

    email: str | None
    full_name: str | None
    password_hash: str | None
    first_login: bool


def _account(sessions: sessionmaker[Session], login: str) -> Account:
    with session_scope(sessions) as session:
        user = session.scalars(select(User).where(User.username == login)).one()
        return Account(user.email, user.full_name, user.password_hash, user.first_login_at is not None)


def _set_up_of(sessions: sessionmaker[Session], login: str) -> tuple[int | None, int | None]:
    """The courses that set up the account's first password and its address."""
    with session_scope(sessions) as session:
        user = session.scalars(select(User).where(User.username == login)).one()
        return user.password_set_up_by_course_id, user.email_set_up_by_course_id


def _course_id(sessions: sessionmaker[Session], slug: str) -> int:
    with session_scope(sessions) as session:
        course = find_course(session, slug)
        assert course is not None
        return course.id


def _refusals(sessions: sessionmaker[Session], login: str) -> list[str]:
    """The details of the `refused` audit rows about `login`, oldest first."""
    with session_scope(sessions) as session:
        return list(session.scalars(select(AuditEvent.detail).where(
            AuditEvent.login == login, AuditEvent.event == "refused").order_by(AuditEvent.id)))


def _links(sessions: sessionmaker[Session], login: str) -> list[tuple[int | None, bool]]:
    """(the course it is tied to, used) of each link `login` was issued, oldest first."""
    with session_scope(sessions) as session:
        return [(course, used is not None) for course, used in session.execute(
            select(PasswordReset.set_up_by_course_id, PasswordReset.used_at).join(User, User.id == PasswordReset.user_id)
            .where(User.username == login).order_by(PasswordReset.id))]


def _older_links(sessions: sessionmaker[Session], login: str) -> None:
    """Date the links `login` was issued ten minutes earlier."""
    with session_scope(sessions) as session:
        for reset in session.scalars(select(PasswordReset).join(User, User.id == PasswordReset.user_id)
                                     .where(User.username == login)):
            reset.created_at -= timedelta(minutes=10)


def _log_in(settings: Settings, login: str, password: str) -> tuple[int, str]:
    client = TestClient(create_app(settings))
    form = client.get("/login").text
    answer = client.post("/login", data={"csrf_token": Browser.csrf(form), "username": login, "password": password},
                         follow_redirects=False)
    return answer.status_code, answer.text


def _ask_forgot(settings: Settings, login: str) -> None:
    client = TestClient(create_app(settings))
    answer = client.post("/forgot", data={"csrf_token": Browser.csrf(client.get("/forgot").text), "username": login})
    assert answer.status_code == 200 and 'id="forgot-sent"' in answer.text, answer.text


def _member_link(browser: Browser, course: str, login: str) -> str:
    """The path of a first-login link the course's instructor issues on its members page."""
    members = f"/courses/{course}/members"
    answer = browser.client.post(f"{members}/{login}/first-login-link", data={"csrf_token": browser.page_csrf(members)})
    found = LINK.search(answer.text)
    assert answer.status_code == 200 and found is not None, answer.text[:600]
    return found.group(1).removeprefix(PUBLIC_URL)


def _set_password(client: TestClient, path: str, password: str) -> tuple[int, str]:
    form = client.get(path).text
    answer = client.post(path, data={"csrf_token": Browser.csrf(form), "new": password, "again": password})
    return answer.status_code, answer.text


@pytest.fixture
def mail(semester: Semester, mailbox: tuple[Mailbox, int]) -> Iterator[Settings]:  # noqa: F811
    """The semester's settings with mail on (for /forgot) and links built on PUBLIC_URL."""
    smtp = SmtpSettings(host="127.0.0.1", port=mailbox[1], security="none", from_=SENDER)
    yield semester.settings.model_copy(update={"smtp": smtp, "public_url": PUBLIC_URL})


def test_what_b_set_up_of_alice_does_not_open_her_once_a_holds_her_too(
        semester: Semester, mail: Settings, mailbox: tuple[Mailbox, int], worker: WorkerProcess) -> None:  # noqa: F811
    sessions, box = semester.sessions, mailbox[0]
    alice, b_address = f"alice-{uuid.uuid4().hex[:6]}", f"alice-{uuid.uuid4().hex[:6]}@b.example.edu"
    prof_b, prof_a = Browser(mail, semester.people["prof_b"]), Browser(mail, semester.people["prof_a"])
    _, first = _imported(prof_b, f"username,name,email,section\n{alice},Alice,{b_address},B1\n", course=semester.b)
    made = _account(sessions, alice)
    b_link = _member_link(prof_b, semester.b, alice)  # allowed: B alone holds her

    _, created = _imported(prof_a, f"username,name,email,section\n{alice},Alice A,alice@a.example.edu,A1\n",
                              course=semester.a)
    assert created == {}
    assert _account(sessions, alice) == made  # enrolling changed nothing of the account

    # B's instructor, as alice: the first password (by login or by B's address), the link, /forgot
    for typed in (alice, b_address):
        code, page = _log_in(mail, typed, first[alice])
        assert code == 403 and SHUT in page and WHO_CAN in page, page[:600]
    refused_form = TestClient(create_app(mail)).get(b_link)
    assert refused_form.status_code == 403 and SHUT in refused_form.text and 'name="new"' not in refused_form.text
    client = TestClient(create_app(mail))
    csrf = Browser.csrf(client.get("/login").text)
    posted = client.post(b_link, data={"csrf_token": csrf, "new": "b's choice of password", "again": "b's choice of password"})
    assert posted.status_code == 403 and SHUT in posted.text
    course_b = _course_id(sessions, semester.b)
    assert _account(sessions, alice) == made and _set_up_of(sessions, alice) == (course_b, course_b)
    assert _links(sessions, alice) == [(course_b, False)]
    before = len(box.received)
    _ask_forgot(mail, alice)
    time.sleep(1)
    assert [to for to, _ in box.received[before:]] == [] and len(_links(sessions, alice)) == 1
    assert [detail.split(": ")[0] for detail in _refusals(sessions, alice)] == [
        "log in with the first password", "log in with the first password", "use a first-login link",
        "use a first-login link", "e-mail a reset link on /forgot"]
    assert all(SHUT in detail for detail in _refusals(sessions, alice))

    # both members pages say what to do, and offer alice no link
    for browser, course, words in ((prof_a, semester.a, SHUT_THERE), (prof_b, semester.b, SHUT_HERE)):
        page = browser.client.get(f"/courses/{course}/members").text
        assert words in page and f"/members/{alice}/first-login-link" not in page, course

    # a site administrator: an address of alice's own, which /forgot mails; a link, which works
    admin = Browser(mail, semester.people["admin"])
    account_page = admin.client.get(f"/accounts/{alice}").text
    saved = admin.client.post(f"/accounts/{alice}/email", data={"csrf_token": admin.csrf(account_page),
                                                                "email": "alice@home.example.org"},
                              follow_redirects=False)
    assert saved.status_code == 303 and _set_up_of(sessions, alice) == (course_b, None)
    _older_links(sessions, alice)  # /forgot mails one link per five minutes, and B's link is minutes old
    _ask_forgot(mail, alice)
    assert "/reset/" in box.wait_for("alice@home.example.org").get_content()
    issued = admin.client.post(f"/accounts/{alice}/reset-link", data={"csrf_token": admin.csrf(account_page)})
    found = LINK.search(issued.text)
    assert issued.status_code == 200 and found is not None
    code, page = _set_password(TestClient(create_app(mail)), found.group(1).removeprefix(PUBLIC_URL), OWN_PASSWORD)
    assert code == 200 and 'id="reset-done"' in page, page[:600]

    # alice's from now on: her password logs her in, the pages show her first login
    assert _account(sessions, alice).first_login and _set_up_of(sessions, alice) == (None, None)
    assert _log_in(mail, alice, OWN_PASSWORD)[0] == 303
    for browser, course in ((prof_a, semester.a), (prof_b, semester.b)):
        page = browser.client.get(f"/courses/{course}/members").text
        assert SHUT_HERE not in page and SHUT_THERE not in page
    assert TestClient(create_app(mail)).get(b_link).status_code == 404  # voided by the link she used


def test_a_course_link_is_for_the_first_login_only(semester: Semester, mail: Settings,
                                                  worker: WorkerProcess) -> None:
    """B's own student, never used: B's first password logs them in (B alone holds them), and
    the link B's instructor gave before is refused from then on, recorded."""
    sessions, bob = semester.sessions, f"bob-{uuid.uuid4().hex[:6]}"
    prof_b = Browser(mail, semester.people["prof_b"])
    _, first = _imported(prof_b, f"username,name\n{bob},Bob\n", course=semester.b)
    link = _member_link(prof_b, semester.b, bob)
    assert _log_in(mail, bob, first[bob])[0] == 303
    form = TestClient(create_app(mail)).get(link)
    assert form.status_code == 403 and "has been used since" in form.text and 'name="new"' not in form.text
    assert _refusals(sessions, bob)[-1].startswith("use a first-login link: This link was for")
    assert _set_up_of(sessions, bob) == (None, None)  # cleared at the first use


def test_what_the_operator_or_an_administrator_set_up_stays_valid(semester: Semester, mail: Settings,
                                                                  cli: CliRunner, tmp_path: Path) -> None:  # noqa: F811
    """The operator's `grader roster import` makes carol in B; A enrolls her: her first password
    still logs her in. One instructor of both courses may not set up an account the two share."""
    sessions, carol = semester.sessions, f"carol-{uuid.uuid4().hex[:6]}"
    roster = tmp_path / "roster.csv"
    roster.write_text(f"username,name,email\n{carol},Carol,{carol}@uni.example.edu\n")
    made = cli.invoke(grader_cli, ["roster", "import", str(roster), "--course", semester.b])
    assert made.exit_code == 0, made.output
    password = dict(line.split(",") for line in made.stdout.splitlines()[1:])[carol]
    prof_a = Browser(mail, semester.people["prof_a"])
    members = f"/courses/{semester.a}/members"
    added = prof_a.client.post(members, data={"csrf_token": prof_a.page_csrf(members), "username": carol,
                                              "part": "student"}, follow_redirects=False)
    assert added.status_code == 303
    assert SHUT_THERE not in prof_a.client.get(members).text
    assert _log_in(mail, carol, password)[0] == 303

    dave = f"dave-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, dave, Role.student, [])
        prof = session.scalars(select(User).where(User.username == semester.people["prof_a"])).one()
        for slug in (semester.a, semester.b):
            course = find_course(session, slug)
            assert course is not None
            enroll(session, user, course, CourseRole.student)
            enroll(session, prof, course, CourseRole.instructor)
    answer = prof_a.client.post(f"{members}/{dave}/first-login-link", data={"csrf_token": prof_a.page_csrf(members)})
    assert answer.status_code == 403 and f"{dave} is in more than one course, so a site administrator gives the " \
                                         "first login." in answer.text
