"""The regrade queue (issue 30) on real PostgreSQL, through the web forms and the API, with mail
received by a real SMTP server: a new request is mailed to the assignment's staff and an answer
to its student; an adjustment of the run from its page, or a re-grade of its submission from
the gradebook or the API, answers the open request it concerns; the queue filters open,
answered and the viewer's own answers; the gradebook links to the queue and to each waiting
student's request; a mail server that is down costs only the mail."""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import enroll, get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Course, CourseRole, RegradeRequest, Role, Run, RunState, utcnow
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings, SmtpSettings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, drop_queues
from tests.service.test_notify_mail import PUBLIC_URL, Mailbox, _free_port, mail_env, mailbox  # noqa: F401
from tests.service.test_staff_workflow import post_form, text_of
from tests.service.test_web_settings import PASSWORD, Browser


@dataclass
class Klass:
    slug: str
    prof: str
    ta: str
    student: str
    settings: Settings

    def email(self, login: str) -> str:
        return f"{login}@example.edu"


@pytest.fixture(scope="module")
def klass(mail_env: dict[str, str], settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Klass]:
    tag = uuid.uuid4().hex[:6]
    slug = f"queue-{tag}"
    with session_scope(sessions) as session:
        course = Course(slug=slug, title=f"Queue {tag}")
        session.add(Assignment(slug=slug, title=f"Queue {tag}", total_points=100, course=course))
        session.flush()
        logins = []
        for who, role, part in (("prof", Role.instructor, CourseRole.instructor), ("ta", Role.student, CourseRole.ta),
                                ("stu", Role.student, CourseRole.student)):
            user = get_or_create_user(session, f"q{who}-{tag}", role, [])
            enroll(session, user, course, part)  # the TA grades (answers requests) and changes no policy
            set_password(user, PASSWORD, SUITE_ARGON2)
            user.email, user.full_name = f"{user.username}@example.edu", f"{who.title()} {tag}"
            logins.append(user.username)
    own = Settings.from_variables({**mail_env, "KG_TASK_QUEUE": f"kg-queue-{tag}"})
    yield Klass(slug, *logins, own)
    drop_queues(own.task_queue)


def scored_run(sessions: sessionmaker[Session], klass: Klass, score: float = 60.0) -> tuple[int, int]:
    """(submission id, run id) of a new scored upload of the student (as the worker records one)."""
    with session_scope(sessions) as session:
        student = get_or_create_user(session, klass.student, Role.student)
        assignment = session.scalars(select(Assignment).where(Assignment.slug == klass.slug)).one()
        _, run = record_submission(session, student, assignment, "hw.zip",
                                   StoredBlob(sha256=uuid.uuid4().hex * 2, size=10))
        run.state, run.score, run.finished_at = RunState.scored, score, utcnow()
        return run.submission_id, run.id


def ask(browser: Browser, sessions: sessionmaker[Session], run_id: int, why: str) -> int:
    """The id of the request `browser` (the student) makes on `run_id`."""
    assert post_form(browser, f"/runs/{run_id}", f"/runs/{run_id}/regrade-request", reason=why) == 303
    return request_of(sessions, run_id).id


def request_of(sessions: sessionmaker[Session], run_id: int) -> RegradeRequest:
    with session_scope(sessions) as session:
        row = session.scalars(select(RegradeRequest).where(RegradeRequest.run_id == run_id)
                              .order_by(RegradeRequest.id.desc())).first()
        assert row is not None
        session.expunge(row)
        return row


def mails_to(box: Mailbox, to: str, subject: str) -> list[str]:
    return [m.get_content().replace("\r\n", "\n") for rcpt, m in box.received if to in rcpt and m["Subject"] == subject]


def test_a_request_is_mailed_to_staff_and_an_adjustment_answers_it_with_mail_to_the_student(
        klass: Klass, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int]) -> None:
    box = mailbox[0]
    _, run_id = scored_run(sessions, klass)
    student, prof = Browser(klass.settings, klass.student), Browser(klass.settings, klass.prof)
    request_id = ask(student, sessions, run_id, "Problem 2.1 timed out on a shared GPU\nPlease look again")
    subject = f"Regrade request on run {run_id} of {klass.slug} by {klass.student}"
    for staff in (klass.prof, klass.ta):
        body = box.wait_for(klass.email(staff), timeout=10) and mails_to(box, klass.email(staff), subject)
        assert len(body) == 1 and "> Problem 2.1 timed out on a shared GPU\n> Please look again" in body[0]
        assert f"{PUBLIC_URL}/assignments/{klass.slug}/regrade-requests#request-{request_id}" in body[0]
    assert not mails_to(box, klass.email(klass.student), subject)  # the student is not staff

    assert post_form(prof, f"/runs/{run_id}", f"/runs/{run_id}/adjustments", points="5",
                     reason="The timeout was ours") == 303
    answered = request_of(sessions, run_id)
    assert (answered.state, answered.reply, answered.adjustment_id is not None) == (
        "accepted", "The timeout was ours", True)
    answer = mails_to(box, klass.email(klass.student), f"Your regrade request on run {run_id} of {klass.slug}: "
                                                       "accepted")
    assert len(answer) == 1 and f"was accepted by {klass.prof}" in answer[0]
    assert "> The timeout was ours" in answer[0] and "adjusted by +5 points" in answer[0]
    assert f"{PUBLIC_URL}/runs/{run_id}" in answer[0]
    page = text_of(student.client.get(f"/runs/{run_id}").text)
    assert f"Reply from {klass.prof}: The timeout was ours" in page and "accepted" in page


def test_a_regrade_of_the_submission_answers_its_open_request(
        klass: Klass, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int]) -> None:
    student, prof = Browser(klass.settings, klass.student), Browser(klass.settings, klass.prof)
    by_page, by_api, untouched = (scored_run(sessions, klass) for _ in range(3))
    for _, run_id in (by_page, by_api, untouched):
        ask(student, sessions, run_id, "Please grade it again")

    assert post_form(prof, "/gradebook", f"/submissions/{by_page[0]}/regrade") == 303
    answered = request_of(sessions, by_page[1])
    assert answered.state == "accepted" and answered.regrade_run_id is not None
    with session_scope(sessions) as session:
        new_run = session.get_one(Run, answered.regrade_run_id)
        assert (new_run.submission_id, new_run.reason) == (by_page[0], "regrade")
    assert answered.reply == f"Re-graded as run {new_run.id}; its grade shows on its page once it is scored."
    mail = mails_to(mailbox[0], klass.email(klass.student),
                    f"Your regrade request on run {by_page[1]} of {klass.slug}: accepted")
    assert len(mail) == 1 and f"graded again as run {new_run.id}: {PUBLIC_URL}/runs/{new_run.id}" in mail[0]

    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, klass.ta, Role.student), "queue")
    made = prof.client.post(f"/api/v1/submissions/{by_api[0]}/regrade", headers=auth(token))
    assert made.status_code == 201
    answered = request_of(sessions, by_api[1])
    assert (answered.state, answered.regrade_run_id) == ("accepted", made.json()["run_id"])
    listed = prof.client.get(f"/api/v1/runs/{by_api[1]}/regrade-requests", headers=auth(token)).json()["items"]
    assert listed[-1]["decided_by"] == klass.ta and listed[-1]["regrade_run_id"] == made.json()["run_id"]
    assert request_of(sessions, untouched[1]).state == "open"  # another submission's request waits


def test_the_queue_filters_open_answered_and_mine(klass: Klass, sessions: sessionmaker[Session]) -> None:
    student = Browser(klass.settings, klass.student)
    prof, ta = Browser(klass.settings, klass.prof), Browser(klass.settings, klass.ta)
    queue = f"/assignments/{klass.slug}/regrade-requests"
    before = {key: len(_listed(prof, queue, key)) for key in ("open", "answered", "mine", "all")}
    runs = [scored_run(sessions, klass)[1] for _ in range(3)]
    asked = [ask(student, sessions, run_id, f"Look at run {run_id}") for run_id in runs]
    assert post_form(prof, queue, f"{queue}/{asked[0]}", action="reject", reply="The grade stands") == 303
    assert post_form(ta, queue, f"{queue}/{asked[1]}", action="adjust", points="2", reply="Partly right") == 303

    assert set(asked) - {asked[0], asked[1]} <= set(_listed(prof, queue, "open"))
    assert asked[2] in _listed(prof, queue, "open") and asked[0] not in _listed(prof, queue, "open")
    assert {asked[0], asked[1]} <= set(_listed(prof, queue, "answered"))
    assert asked[0] in _listed(prof, queue, "mine") and asked[1] not in _listed(prof, queue, "mine")
    assert asked[1] in _listed(ta, queue, "mine") and asked[0] not in _listed(ta, queue, "mine")
    after = {key: len(_listed(prof, queue, key)) for key in ("open", "answered", "mine", "all")}
    assert after == {"open": before["open"] + 1, "answered": before["answered"] + 2, "mine": before["mine"] + 1,
                     "all": before["all"] + 3}
    page = prof.client.get(queue).text  # the default is the open ones, and the links count each list
    assert f'id="show-open" aria-current="page">Open ({after["open"]})' in page
    assert f'id="show-mine">Answered by me ({after["mine"]})' in page
    assert prof.client.get(queue, params={"show": "nonsense"}).text.count('aria-current="page">Open') == 1
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, klass.ta, Role.student), "filters")
    api = f"/api/v1/assignments/{klass.slug}/regrade-requests"
    mine = ta.client.get(api, params={"show": "mine"}, headers=auth(token)).json()["items"]
    assert asked[1] in [r["id"] for r in mine] and {r["decided_by"] for r in mine} == {klass.ta}
    every = [r["id"] for r in ta.client.get(api, headers=auth(token)).json()["items"]]
    assert set(asked) <= set(every) and len(every) == after["all"]


def _listed(browser: Browser, queue: str, show: str) -> list[int]:
    html = browser.client.get(queue, params={"show": show}).text
    return [int(i) for i in re.findall(r'<article class="regrade-request" id="request-(\d+)"', html)]


def test_the_gradebook_links_to_the_queue_and_each_waiting_student(klass: Klass,
                                                                   sessions: sessionmaker[Session]) -> None:
    student, prof = Browser(klass.settings, klass.student), Browser(klass.settings, klass.prof)
    _, run_id = scored_run(sessions, klass)
    request_id = ask(student, sessions, run_id, "Please check problem 3")
    book = prof.client.get("/gradebook", params={"assignment": klass.slug}).text
    assert f'href="/assignments/{klass.slug}/regrade-requests">Regrade requests:' in book
    assert f'href="/assignments/{klass.slug}/regrade-requests#request-' in book  # the student's row
    queue = f"/assignments/{klass.slug}/regrade-requests"
    for open_id in _listed(prof, queue, "open"):  # answer every open one: the row's link goes
        assert post_form(prof, queue, f"{queue}/{open_id}", action="reject", reply="Checked") == 303
    book = prof.client.get("/gradebook", params={"assignment": klass.slug}).text
    assert "0 students waiting for an answer" in book and "regrade requested</a>" not in book
    assert request_of(sessions, run_id).id == request_id


def test_a_mail_server_that_is_down_costs_only_the_mail(klass: Klass, sessions: sessionmaker[Session]) -> None:
    down = klass.settings.model_copy(update={"smtp": SmtpSettings(host="127.0.0.1", port=_free_port(),
                                                                  security="none", from_="grader@example.edu")})
    student, prof = Browser(down, klass.student), Browser(down, klass.prof)
    _, run_id = scored_run(sessions, klass)
    request_id = ask(student, sessions, run_id, "The mail server is down")
    queue = f"/assignments/{klass.slug}/regrade-requests"
    assert post_form(prof, queue, f"{queue}/{request_id}", action="reject", reply="Still answered") == 303
    assert (request_of(sessions, run_id).state, request_of(sessions, run_id).reply) == ("rejected", "Still answered")


def test_the_staff_navigation_counts_the_waiting_requests(klass: Klass, sessions: sessionmaker[Session]) -> None:
    student = Browser(klass.settings, klass.student)
    prof, ta = Browser(klass.settings, klass.prof), Browser(klass.settings, klass.ta)
    queue = f"/assignments/{klass.slug}/regrade-requests"

    def shown(browser: Browser) -> tuple[str, int] | None:
        found = re.search(r'<a href="([^"]+)" id="nav-requests">Regrade requests \((\d+)<',
                          browser.client.get("/gradebook", params={"assignment": klass.slug}).text)
        return (found.group(1), int(found.group(2))) if found else None

    for open_id in _listed(prof, queue, "open"):  # none waits: the link still names the queue
        assert post_form(prof, queue, f"{queue}/{open_id}", action="reject", reply="Checked") == 303
    assert shown(prof) == (queue, 0)
    first = ask(student, sessions, scored_run(sessions, klass)[1], "Please look at problem 1")
    ask(student, sessions, scored_run(sessions, klass)[1], "And problem 2")
    assert shown(prof) == shown(ta) == (queue, 2)  # instructor and TA alike
    assert 'id="nav-requests"' not in student.client.get("/submissions").text
    assert post_form(ta, queue, f"{queue}/{first}", action="reject", reply="The grade stands") == 303
    assert shown(prof) == (queue, 1)
