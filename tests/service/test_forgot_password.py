"""A student asks for a reset link on /forgot and it is e-mailed, received by a real SMTP server
(aiosmtpd): the link, built on KG_PUBLIC_URL whatever Host the request named, sets the password
once; a staff account's person gets theirs the same way (their address is theirs alone:
grader.auth.ownership). The page answers the same for an unknown login, an account with no
address and a second ask within five minutes, and none of those sends mail or issues a link.
Without mail configured the login page offers no such link and /forgot sends nothing."""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import PasswordReset, Role, User
from grader.settings import Settings, SmtpSettings
from tests.service.test_notify_mail import PUBLIC_URL, SENDER, Mailbox, mailbox  # noqa: F401 (fixture)
from tests.service.test_security import csrf_of

NEW_PASSWORD = "a new password, long enough"


@pytest.fixture(scope="module")
def mail_app(settings: Settings, mailbox: tuple[Mailbox, int]) -> Iterator[TestClient]:
    smtp = SmtpSettings(host="127.0.0.1", port=mailbox[1], security="none", from_=SENDER)
    with TestClient(create_app(settings.model_copy(update={"smtp": smtp, "public_url": PUBLIC_URL}))) as client:
        yield client


def _account(sessions: sessionmaker[Session], email: str | None, role: Role = Role.student) -> str:
    login = f"forgot-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        get_or_create_user(session, login, role).email = email
    return login


def _links_issued(sessions: sessionmaker[Session], login: str) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count(PasswordReset.id)).join(User, User.id == PasswordReset.user_id)
                                  .where(User.username == login)) or 0)


def _ask(client: TestClient, login: str, **headers: str) -> str:
    form = client.get("/forgot")
    assert form.status_code == 200 and 'action="/forgot"' in form.text
    answer = client.post("/forgot", data={"csrf_token": csrf_of(form.text), "username": login}, headers=headers)
    assert answer.status_code == 200 and 'id="forgot-sent"' in answer.text, answer.text
    return answer.text.replace(login, "LOGIN")


def test_a_student_sets_a_new_password_from_the_mailed_link(
        mail_app: TestClient, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int]) -> None:
    address = f"ada-{uuid.uuid4().hex[:6]}@uni.example.edu"
    login = _account(sessions, address)
    assert 'href="/forgot"' in mail_app.get("/login").text

    _ask(mail_app, login, host="attacker.example")  # the link must not follow the request's Host
    mail = mailbox[0].wait_for(address)
    assert mail["From"] == SENDER and "new password" in mail["Subject"]
    text = mail.get_content()
    assert login in text and "24 hours" in text
    [link] = re.findall(r"https?://\S+", text)
    assert link.startswith(PUBLIC_URL + "/reset/") and "attacker" not in text

    path = link.removeprefix(PUBLIC_URL)
    form = mail_app.get(path)
    assert form.status_code == 200 and login in form.text
    done = mail_app.post(path, data={"csrf_token": csrf_of(form.text), "new": NEW_PASSWORD, "again": NEW_PASSWORD})
    assert done.status_code == 200 and 'id="reset-done"' in done.text
    assert mail_app.get(path).status_code == 404  # used once

    page = mail_app.get("/login")
    logged_in = mail_app.post("/login", data={"csrf_token": csrf_of(page.text), "username": login,
                                              "password": NEW_PASSWORD}, follow_redirects=False)
    assert logged_in.status_code == 303
    mail_app.post("/logout", data={"csrf_token": csrf_of(mail_app.get("/").text)})


def test_the_answer_is_the_same_and_nothing_is_sent_where_no_link_is_due(
        mail_app: TestClient, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int]) -> None:
    box = mailbox[0]
    address = f"bob-{uuid.uuid4().hex[:6]}@uni.example.edu"
    student = _account(sessions, address)
    first = _ask(mail_app, student)
    box.wait_for(address)
    staff_address = f"prof-{uuid.uuid4().hex[:6]}@uni.example.edu"
    staff, no_address = _account(sessions, staff_address, Role.instructor), _account(sessions, None)
    before = len(box.received)
    answers = [_ask(mail_app, student),  # again within five minutes
               _ask(mail_app, staff), _ask(mail_app, no_address), _ask(mail_app, f"nobody-{uuid.uuid4().hex[:6]}")]
    assert answers == [first] * 4
    assert "/reset/" in box.wait_for(staff_address).get_content()  # staff too: the address is the person's
    time.sleep(2)  # a mail sent after the answer would have arrived by now
    assert len(box.received) == before + 1
    assert [_links_issued(sessions, login) for login in (student, staff, no_address)] == [1, 1, 0]


def test_no_link_is_mailed_to_a_role_that_logs_in_without_a_password(
        settings: Settings, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int]) -> None:
    """KG_PASSWORD_LOGIN_ROLES=instructor: a student's ask is answered as any other, and issues
    and mails nothing; an instructor's still gets their link."""
    smtp = SmtpSettings(host="127.0.0.1", port=mailbox[1], security="none", from_=SENDER)
    app = create_app(settings.model_copy(update={"smtp": smtp, "public_url": PUBLIC_URL,
                                                 "password_login_roles": [Role.instructor]}))
    student_address, staff_address = (f"{who}-{uuid.uuid4().hex[:6]}@uni.example.edu" for who in ("sso", "prof"))
    student, staff = _account(sessions, student_address), _account(sessions, staff_address, Role.instructor)
    with TestClient(app) as client:
        assert "Student accounts have no password here" in client.get("/forgot").text
        assert _ask(client, student) == _ask(client, staff)
        assert "/reset/" in mailbox[0].wait_for(staff_address).get_content()
    assert [_links_issued(sessions, login) for login in (student, staff)] == [0, 1]
    assert all(student_address not in recipients for recipients, _ in mailbox[0].received)


def test_without_mail_the_login_page_sends_students_to_their_staff(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    assert not settings.smtp.host
    login = _account(sessions, f"cy-{uuid.uuid4().hex[:6]}@uni.example.edu")
    client = TestClient(create_app(settings))
    assert 'href="/forgot"' not in client.get("/login").text
    offered = client.get("/forgot")
    assert offered.status_code == 200 and 'id="forgot-staff"' in offered.text
    answer = client.post("/forgot", data={"csrf_token": csrf_of(client.get("/login").text), "username": login})
    assert answer.status_code == 200 and 'id="forgot-staff"' in answer.text
    assert _links_issued(sessions, login) == 0
