"""Staff mail and first logins (issue 49), received by a real SMTP server (aiosmtpd): a new
regrade request and a run that failed on the grading side reach the course's instructors and
TAs who have an address and keep their staff mail on (a TA turns it off on their account page);
an outage that fails many runs sends one mail per KG_STAFF_MAIL_QUIET_S. An instructor re-issues
the first logins of every account of the course that nobody has used: links e-mailed where the
account has an address, the rest in the CSV they download; an account another course holds too
gets nothing, and the CSV says why."""
from __future__ import annotations

import csv
import io
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.course.courses import create_course
from grader.course.membership import enroll, get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, AuditEvent, CourseRole, ErrorClass, Role, RunState, User, utcnow
from grader.notify import notify_run_ended
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import drop_queues
from tests.service.test_notify_mail import PUBLIC_URL, Mailbox, mail_env, mailbox  # noqa: F401 (fixtures)
from tests.service.test_regrade_queue import ask, mails_to
from tests.service.test_web_settings import PASSWORD, Browser


@dataclass
class Staffed:
    course: str
    slug: str
    people: dict[str, str]  # who -> login
    settings: Settings  # mail on

    def email(self, who: str) -> str:
        return f"{self.people[who]}@example.edu"


# who -> (part, has an address, logged in before the test)
CAST = {"prof": (CourseRole.instructor, True, True), "ta": (CourseRole.ta, True, True),
        "quiet_ta": (CourseRole.ta, True, True), "ta_new": (CourseRole.ta, True, False),
        "stu": (CourseRole.student, False, True), "stu_mail": (CourseRole.student, True, False),
        "stu_plain": (CourseRole.student, False, False), "stu_shared": (CourseRole.student, True, False)}


@pytest.fixture
def staffed(mail_env: dict[str, str], sessions: sessionmaker[Session]) -> Iterator[Staffed]:
    tag = uuid.uuid4().hex[:6]
    people = {who: f"sm-{who.replace('_', '-')}-{tag}" for who in CAST}
    with session_scope(sessions) as session:
        course, elsewhere = create_course(session, f"sm-{tag}", "Staff mail"), create_course(session, f"sm-x-{tag}", "X")
        session.add(Assignment(slug=f"sm-{tag}", title="Staff mail", total_points=100, course=course))
        for who, (part, addressed, _) in CAST.items():
            user = get_or_create_user(session, people[who], Role.instructor if who == "prof" else Role.student, [])
            enroll(session, user, course, part)
            user.email = f"{people[who]}@example.edu" if addressed else None
            set_password(user, PASSWORD, SUITE_ARGON2)
        enroll(session, session.scalars(select(User).where(User.username == people["stu_shared"])).one(), elsewhere,
               CourseRole.student)
    own = Settings.from_variables({**mail_env, "KG_TASK_QUEUE": f"kg-sm-{tag}", "KG_STAFF_MAIL_QUIET_S": "600"})
    for who, (_, _, logged_in) in CAST.items():
        if logged_in:
            Browser(own, people[who])
    yield Staffed(f"sm-{tag}", f"sm-{tag}", people, own)
    drop_queues(own.task_queue)


def _turn_off_staff_mail(staffed: Staffed, who: str) -> None:
    browser = Browser(staffed.settings, staffed.people[who])
    answer = browser.client.post("/settings/account/staff-mail", data={"csrf_token": browser.page_csrf(
        "/settings/account")}, follow_redirects=False)  # the box unticked
    assert answer.status_code == 303


def _run(sessions: sessionmaker[Session], staffed: Staffed, **values: object) -> int:
    """A new run of the student's in the course's assignment, with `values`."""
    with session_scope(sessions) as session:
        student = session.scalars(select(User).where(User.username == staffed.people["stu"])).one()
        assignment = session.scalars(select(Assignment).where(Assignment.slug == staffed.slug)).one()
        _, run = record_submission(session, student, assignment, "hw.zip", StoredBlob(uuid.uuid4().hex * 2, 10))
        for key, value in values.items():
            setattr(run, key, value)
        return run.id


def _quiet(box: Mailbox, before: int) -> list[str]:
    """The recipients of what arrived after the first `before` mails, once a stray mail would have."""
    time.sleep(2)
    return [to for recipients, _ in box.received[before:] for to in recipients]


def test_a_regrade_request_reaches_the_staff_who_keep_their_mail_on(
        staffed: Staffed, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int]) -> None:
    box = mailbox[0]
    _turn_off_staff_mail(staffed, "quiet_ta")
    run_id = _run(sessions, staffed, state=RunState.scored, score=50.0, finished_at=utcnow())
    before = len(box.received)
    ask(Browser(staffed.settings, staffed.people["stu"]), sessions, run_id, "Please look again")
    subject = f"Regrade request on run {run_id} of {staffed.slug} by {staffed.people['stu']}"
    box.wait_for(staffed.email("prof"), timeout=10)
    box.wait_for(staffed.email("ta"), timeout=10)
    received = _quiet(box, before)
    assert staffed.email("quiet_ta") not in received and staffed.email("stu_mail") not in received
    assert sorted(received) == sorted([staffed.email(who) for who in ("prof", "ta", "ta_new")])
    assert len(mails_to(box, staffed.email("prof"), subject)) == 1


def test_failed_grading_mails_the_staff_once_per_quiet_window(
        staffed: Staffed, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int]) -> None:
    box = mailbox[0]
    _turn_off_staff_mail(staffed, "quiet_ta")
    failed = {"state": RunState.failed, "error_class": ErrorClass.infra_error, "message": "the GPU fell off the bus"}
    first = _run(sessions, staffed, finished_at=utcnow(), **failed)
    before = len(box.received)
    notify_run_ended(staffed.settings, sessions, first)  # as the worker does once it recorded the run
    subject = f"Grading failed: run {first} of {staffed.slug}"
    [text] = mails_to(box, staffed.email("prof"), subject)
    assert "> the GPU fell off the bus" in text and f"{PUBLIC_URL}/assignments/{staffed.slug}/grading" in text
    assert sorted(_quiet(box, before)) == sorted(staffed.email(who) for who in ("prof", "ta", "ta_new"))
    before = len(box.received)  # a second failure of the same outage: no mail
    notify_run_ended(staffed.settings, sessions, _run(sessions, staffed, finished_at=utcnow(), **failed))
    assert _quiet(box, before) == []
    # a run of another kind tells its student only (here: no address, so nobody)
    notify_run_ended(staffed.settings, sessions, _run(sessions, staffed, finished_at=utcnow(), state=RunState.failed,
                                                      error_class=ErrorClass.build_error, message="nvcc said no"))
    assert _quiet(box, before) == []
    eager = staffed.settings.model_copy(update={"staff_mail_quiet_s": 0})
    notify_run_ended(eager, sessions, _run(sessions, staffed, finished_at=utcnow(), **failed))
    assert len(_quiet(box, before)) == 3  # no quiet window: every failure mails


def _audit_of(sessions: sessionmaker[Session], login: str, event: str) -> list[str]:
    with session_scope(sessions) as session:
        return list(session.scalars(select(AuditEvent.detail).where(AuditEvent.login == login,
                                                                    AuditEvent.event == event).order_by(AuditEvent.id)))


def test_first_logins_are_reissued_by_mail_and_as_a_csv(
        staffed: Staffed, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int]) -> None:
    box = mailbox[0]
    prof, members = Browser(staffed.settings, staffed.people["prof"]), f"/courses/{staffed.course}/members"
    page = prof.client.get(members).text
    assert "4 accounts of" in page and "have never been used" in page and "2 of them go by e-mail" in page
    answer = prof.client.post(f"/courses/{staffed.course}/first-logins", data={"csrf_token": prof.csrf(page)})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    assert f'filename="first-logins-{staffed.course}.csv"' in answer.headers["content-disposition"]
    rows = {row["login"]: row for row in csv.DictReader(io.StringIO(answer.text))}
    login = staffed.people
    assert set(rows) == {login[w] for w in ("ta_new", "stu_mail", "stu_plain", "stu_shared")}  # never used
    for who in ("ta_new", "stu_mail"):
        assert rows[login[who]]["link"] == "" and rows[login[who]]["note"] == f"e-mailed to {staffed.email(who)}"
    assert rows[login["stu_plain"]]["link"].startswith(PUBLIC_URL + "/reset/")
    assert rows[login["stu_shared"]]["link"] == "" and rows[login["stu_shared"]]["note"].startswith(
        f"no link: {login['stu_shared']} is also enrolled in a course you do not instruct.")
    mail = box.wait_for(staffed.email("stu_mail"), timeout=10)
    assert mail["Subject"] == f"kernelgrade: your account for {staffed.course}"
    [link] = [line for line in mail.get_content().splitlines() if line.startswith(PUBLIC_URL + "/reset/")]
    assert _audit_of(sessions, login["stu_mail"], "reset_issued") == [
        f"first-login link, e-mailed to {staffed.email('stu_mail')} ({staffed.course})"]
    assert _audit_of(sessions, login["stu_plain"], "reset_issued") == [f"first-login link, in the CSV of "
                                                                      f"{staffed.course}"]
    assert _audit_of(sessions, login["stu_shared"], "reset_issued") == []
    # the mailed link works once, and the account is its person's from then on
    student, path = TestClient(create_app(staffed.settings)), link.removeprefix(PUBLIC_URL)
    form = student.get(path)
    done = student.post(path, data={"csrf_token": Browser.csrf(form.text), "new": "my very own password",
                                    "again": "my very own password"})
    assert done.status_code == 200 and 'id="reset-done"' in done.text
    again = prof.client.post(f"/courses/{staffed.course}/first-logins",
                             data={"csrf_token": prof.page_csrf(members)})
    assert login["stu_mail"] not in again.text and login["stu_plain"] in again.text
