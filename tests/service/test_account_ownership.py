"""Accounts belong to their people (grader.auth.ownership), on PostgreSQL through the real pages
and commands: the attack chains of issue 49 fail for the attacker, each refusal in the audit log.

Course A has an instructor, a TA and two students; course B has its own instructor and TA. A
student (`shared`) and a TA (`shared_ta`) are in both. B's instructor tries to take A's people
over: a first-login link for the shared student, for the shared TA, or for A's own student once
they enrolled them in B; the shared student's e-mail on B's members page or by B's roster
import. Each is refused in a sentence naming who can, recorded, and changes nothing; where the
account is B's alone and never used, the same requests succeed (the controls). A site
administrator may change anyone's e-mail and give anyone a link; the person changes their own.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.cli.main import app as grader_cli
from grader.course.courses import create_course
from grader.course.membership import courses_of, enroll, get_or_create_user
from grader.course.roster import import_roster
from grader.db import session_scope
from grader.models import AuditEvent, Course, CourseRole, PasswordReset, Role, User
from grader.passwords import set_password
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_capacity_cli import cli  # noqa: F401 (fixture)
from tests.service.test_web_settings import PASSWORD, Browser

LINK = re.compile(r'<code id="reset-link">(/reset/[^<]+)</code>')  # a path: no KG_PUBLIC_URL here
WHO_CAN = "(on their account page, or on /forgot for a new password) or a site administrator can do that."


@dataclass
class Semester:
    a: str  # course slugs
    b: str
    people: dict[str, str]  # who -> login
    settings: Settings
    sessions: sessionmaker[Session]

    def browser(self, who: str) -> Browser:
        return Browser(self.settings, self.people[who])

    def user(self, who: str) -> User:
        with session_scope(self.sessions) as session:
            user = session.scalars(select(User).where(User.username == self.people[who])).one()
            session.expunge(user)
            return user

    def links_of(self, who: str) -> int:
        with session_scope(self.sessions) as session:
            return session.scalar(select(func.count(PasswordReset.id)).join(User, User.id == PasswordReset.user_id)
                                  .where(User.username == self.people[who])) or 0

    def audit(self, who: str, event: str) -> list[tuple[str | None, str]]:
        """(actor's login, detail) of each `event` about `who`'s account, oldest first."""
        with session_scope(self.sessions) as session:
            rows = session.execute(select(AuditEvent.actor_id, AuditEvent.detail).where(
                AuditEvent.login == self.people[who], AuditEvent.event == event).order_by(AuditEvent.id)).all()
            return [(session.get(User, actor).username if actor else None, detail)  # type: ignore[union-attr]
                    for actor, detail in rows]


# Who is in which course, as what; True: has logged in before the test starts
CAST = {
    "prof_a": ((("a", CourseRole.instructor),), True),
    "prof_b": ((("b", CourseRole.instructor),), True),
    "ta_a": ((("a", CourseRole.ta),), True),
    "ta_b": ((("b", CourseRole.ta),), False),  # B's own TA, never logged in
    "shared": ((("a", CourseRole.student), ("b", CourseRole.student)), False),
    "shared_ta": ((("a", CourseRole.ta), ("b", CourseRole.ta)), False),
    "a_only": ((("a", CourseRole.student),), True),
    "a_new": ((("a", CourseRole.student),), False),  # A's student, never logged in
    "b_only": ((("b", CourseRole.student),), False),  # B's student, never logged in
    "admin": ((), True),  # a site administrator, in no course
}


@pytest.fixture
def semester(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Semester]:
    tag = uuid.uuid4().hex[:6]
    people = {who: f"own-{who.replace('_', '-')}-{tag}" for who in CAST}
    slugs = {"a": f"own-a-{tag}", "b": f"own-b-{tag}"}
    with session_scope(sessions) as session:
        courses = {key: create_course(session, slug, f"Course {key.upper()}") for key, slug in slugs.items()}
        for who, (parts, _) in CAST.items():
            user = get_or_create_user(session, people[who], Role.instructor if who.startswith("prof") else Role.student,
                                      [])
            user.full_name, user.email = f"Name of {who}", f"{people[who]}@uni.example.edu"
            user.site_admin = who == "admin"
            set_password(user, PASSWORD, SUITE_ARGON2)
            for key, part in parts:
                enroll(session, user, courses[key], part)
    found = Semester(slugs["a"], slugs["b"], people, settings, sessions)
    for who, (_, logged_in) in CAST.items():
        if logged_in:
            found.browser(who)
    yield found


def _first_login_link(browser: Browser, login: str) -> tuple[int, str, str | None]:
    """What the roster page's first-login link form answers: (status, page, the link shown)."""
    answer = browser.client.post("/roster/reset-link", data={"csrf_token": browser.page_csrf("/roster"),
                                                              "username": login})
    found = LINK.search(answer.text)
    return answer.status_code, answer.text, found.group(1) if found else None


def test_b_instructor_gets_no_link_for_a_student_that_a_holds(semester: Semester) -> None:
    """Chain 1: the shared student has never logged in, and B's instructor instructs a course they
    are in; the link would still hand them A's work and uploads. Refused, recorded, no link."""
    prof_b = semester.browser("prof_b")
    code, page, link = _first_login_link(prof_b, semester.people["shared"])
    assert (code, link) == (403, None), page[:400]
    sentence = f"{semester.people['shared']} is also enrolled in a course you do not instruct. Only "
    assert sentence in page and WHO_CAN in page
    assert semester.links_of("shared") == 0
    [(actor, detail)] = semester.audit("shared", "refused")
    assert actor == semester.people["prof_b"] and detail.startswith("issue a first-login link: " + sentence)
    # the members page's own button refuses the same, for the shared TA too
    for who in ("shared", "shared_ta"):
        path = f"/courses/{semester.b}/members/{semester.people[who]}/first-login-link"
        answer = prof_b.client.post(path, data={"csrf_token": prof_b.page_csrf(f"/courses/{semester.b}/members")})
        assert answer.status_code == 403 and WHO_CAN in answer.text and not LINK.search(answer.text)
        assert semester.links_of(who) == 0 and semester.audit(who, "refused")[-1][0] == semester.people["prof_b"]
    # A's instructor may not either: the shared TA is B's TA too
    code, page, link = _first_login_link(semester.browser("prof_a"), semester.people["shared_ta"])
    assert (code, link) == (403, None) and "is also enrolled in a course you do not instruct" in page


def test_enrolling_a_student_of_a_adds_the_enrollment_and_nothing_else(semester: Semester) -> None:
    """Chain 1b: B's instructor enrolls A's students in B (allowed: the enrollment alone, its
    owner sees the new course), then asks for their links: refused, whether they logged in or not."""
    prof_b = semester.browser("prof_b")
    members = f"/courses/{semester.b}/members"
    for who in ("a_only", "a_new"):
        before = semester.user(who)
        added = prof_b.client.post(members, data={"csrf_token": prof_b.page_csrf(members),
                                                  "username": semester.people[who], "part": "student"},
                                   follow_redirects=False)
        assert added.status_code == 303
        after = semester.user(who)
        assert (after.email, after.full_name, after.password_hash, after.first_login_at) == (
            before.email, before.full_name, before.password_hash, before.first_login_at)
        [(actor, detail)] = semester.audit(who, "enrolled")
        assert (actor, detail) == (semester.people["prof_b"], f"{semester.b} as student; also in {semester.a}")
    refusals = {"a_only": "has logged in before, so the account is theirs.",
                "a_new": "is also enrolled in a course you do not instruct."}
    for who, why in refusals.items():
        code, page, link = _first_login_link(prof_b, semester.people[who])
        assert (code, link) == (403, None) and f"{semester.people[who]} {why} Only" in page, page[:400]
        assert semester.links_of(who) == 0 and semester.audit(who, "refused")[-1][0] == semester.people["prof_b"]
    account = semester.browser("a_only").client.get("/settings/account").text  # the owner sees the new course
    assert f"{semester.b} (Course B)" in account and f"{semester.a} (Course A)" in account


def test_the_shared_students_e_mail_is_theirs(semester: Semester) -> None:
    """The takeover through /forgot: B changes the shared student's address on its members page
    or with its roster, then asks /forgot. The page refuses (recorded); the roster's address stays
    B's (on its enrollment), never the account's."""
    prof_b = semester.browser("prof_b")
    members = f"/courses/{semester.b}/members"
    answer = prof_b.client.post(f"{members}/{semester.people['shared']}/email", data={
        "csrf_token": prof_b.page_csrf(members), "email": "attacker@b.example.edu"})
    assert answer.status_code == 403 and WHO_CAN in answer.text
    assert semester.user("shared").email == f"{semester.people['shared']}@uni.example.edu"
    assert semester.audit("shared", "refused")[-1][1].startswith("change the e-mail: ")
    with session_scope(semester.sessions) as session:
        course_b = session.scalars(select(Course).where(Course.slug == semester.b)).one()
        report = import_roster(session, f"username,name,email,section\n{semester.people['shared']},Someone Else,"
                                        f"attacker@b.example.edu,B9\n", course_b, SUITE_ARGON2)
    assert not report.errors, report
    shared = semester.user("shared")
    assert (shared.email, shared.full_name) == (f"{semester.people['shared']}@uni.example.edu", "Name of shared")


def test_an_instructor_sets_up_their_own_never_used_accounts_until_their_person_takes_them(
        semester: Semester) -> None:
    """The controls: B's TA, B's alone and never used, gets an e-mail and a link from B's
    instructor; once the TA has chosen a password with it, B's instructor reaches neither."""
    prof_b = semester.browser("prof_b")
    members = f"/courses/{semester.b}/members"
    page = prof_b.client.get(members).text
    ta = semester.people["ta_b"]
    assert f'action="{members}/{ta}/first-login-link"' in page and f'action="{members}/{ta}/email"' in page
    for other in ("shared", "shared_ta", "prof_b"):
        assert f'{members}/{semester.people[other]}/first-login-link"' not in page
    saved = prof_b.client.post(f"{members}/{ta}/email", data={"csrf_token": prof_b.csrf(page),
                                                              "email": "ta.b@uni.example.edu"}, follow_redirects=False)
    assert saved.status_code == 303 and semester.user("ta_b").email == "ta.b@uni.example.edu"
    assert semester.audit("ta_b", "email_changed") == [
        (semester.people["prof_b"], f"{ta}@uni.example.edu -> ta.b@uni.example.edu")]
    issued = prof_b.client.post(f"{members}/{ta}/first-login-link", data={"csrf_token": prof_b.page_csrf(members)})
    link = LINK.search(issued.text)
    assert issued.status_code == 200 and link is not None and issued.headers["cache-control"] == "no-store"
    assert semester.audit("ta_b", "reset_issued") == [(semester.people["prof_b"],
                                                       "first-login link, shown on the members page")]
    anonymous = TestClient(create_app(semester.settings))
    form = anonymous.get(link.group(1)).text
    done = anonymous.post(link.group(1), data={"csrf_token": Browser.csrf(form), "new": "the TA's own password",
                                               "again": "the TA's own password"})
    assert done.status_code == 200 and semester.user("ta_b").first_login_at is not None
    code, page, _ = _first_login_link(prof_b, ta)
    assert code == 403 and f"{ta} has logged in before, so the account is theirs." in page
    refused = prof_b.client.post(f"{members}/{ta}/email", data={"csrf_token": prof_b.page_csrf(members),
                                                                "email": "other@uni.example.edu"})
    assert refused.status_code == 403 and semester.user("ta_b").email == "ta.b@uni.example.edu"


def test_the_person_changes_their_own_e_mail_with_their_password(semester: Semester) -> None:
    ta = semester.browser("ta_a")
    page = ta.client.get("/settings/account")
    assert page.status_code == 200 and semester.a in page.text and 'id="staff-mail"' in page.text
    wrong = ta.client.post("/settings/account/email", data={"csrf_token": ta.csrf(page.text),
                                                            "current": "not it", "email": "mine@uni.example.edu"})
    assert wrong.status_code == 400 and "current password is not right" in wrong.text
    assert semester.user("ta_a").email == f"{semester.people['ta_a']}@uni.example.edu"
    bad = ta.client.post("/settings/account/email", data={"csrf_token": ta.csrf(page.text), "current": PASSWORD,
                                                          "email": "not an address"})
    assert bad.status_code == 400 and "is not an e-mail address" in bad.text
    saved = ta.client.post("/settings/account/email", data={"csrf_token": ta.csrf(page.text), "current": PASSWORD,
                                                            "email": "mine@uni.example.edu"}, follow_redirects=False)
    assert saved.status_code == 303 and semester.user("ta_a").email == "mine@uni.example.edu"
    assert semester.audit("ta_a", "email_changed") == [
        (None, f"{semester.people['ta_a']}@uni.example.edu -> mine@uni.example.edu")]
    off = ta.client.post("/settings/account/staff-mail", data={"csrf_token": ta.csrf(page.text)},
                         follow_redirects=False)
    assert off.status_code == 303 and semester.user("ta_a").staff_mail is False
    assert semester.audit("ta_a", "staff_mail") == [(None, "off")]


def test_a_site_administrator_changes_anyones_e_mail_and_gives_a_link(semester: Semester) -> None:
    shared = semester.people["shared"]
    prof_b = semester.browser("prof_b")
    refused = prof_b.client.get(f"/accounts/{shared}")
    assert refused.status_code == 403 and "Only a site administrator" in refused.text
    assert semester.audit("shared", "refused")[-1] == (
        semester.people["prof_b"], "open the account page: Only a site administrator sees or changes another "
                                   "person's account; yours is at /settings/account.")
    admin = semester.browser("admin")
    found = admin.client.get(f"/accounts?login={shared.upper()}", follow_redirects=False)
    assert found.status_code == 303 and found.headers["location"] == f"/accounts/{shared}"
    page = admin.client.get(f"/accounts/{shared}").text
    assert f"{semester.a} (Course A)" in page and f"{semester.b} (Course B)" in page
    saved = admin.client.post(f"/accounts/{shared}/email", data={"csrf_token": admin.csrf(page),
                                                                 "email": "new@uni.example.edu"},
                              follow_redirects=False)
    assert saved.status_code == 303 and semester.user("shared").email == "new@uni.example.edu"
    assert semester.audit("shared", "email_changed")[-1] == (
        semester.people["admin"], f"{shared}@uni.example.edu -> new@uni.example.edu")
    issued = admin.client.post(f"/accounts/{shared}/reset-link", data={"csrf_token": admin.csrf(page)})
    assert issued.status_code == 200 and LINK.search(issued.text) and semester.links_of("shared") == 1
    # the rules' controls: an instructor of every course of A's never-used student may give them a link
    code, _, link = _first_login_link(semester.browser("prof_a"), semester.people["a_new"])
    assert code == 200 and link is not None


def test_user_add_without_a_course_enrolls_nowhere_when_there_are_several(
        semester: Semester, cli: CliRunner) -> None:
    """Chain 3: `grader user add` without --course made B's instructor an instructor of every
    course, A's included. Now it enrolls nowhere and says so; --course enrolls there alone."""
    tag = uuid.uuid4().hex[:6]
    made = cli.invoke(grader_cli, ["user", "add", f"prof-c-{tag}", "--role", "instructor"])
    assert made.exit_code == 0, made.output
    assert f"user prof-c-{tag} (instructor)" in made.output and "enrolled in nothing" in made.output
    assert "enrolled nowhere: " in made.output and "name one with --course" in made.output
    chosen = cli.invoke(grader_cli, ["user", "add", f"prof-d-{tag}", "--role", "instructor", "--course", semester.b,
                                     "--email", f"prof-d-{tag}@uni.example.edu", "--site-admin"])
    assert chosen.exit_code == 0 and f"enrolled in {semester.b} (instructor)" in chosen.output, chosen.output
    with session_scope(semester.sessions) as session:
        for login, wanted in ((f"prof-c-{tag}", []), (f"prof-d-{tag}", [semester.b])):
            user = session.scalars(select(User).where(User.username == login)).one()
            assert [course.slug for course, _ in courses_of(session, user.id)] == wanted
        made_d = session.scalars(select(User).where(User.username == f"prof-d-{tag}")).one()
        assert made_d.site_admin and made_d.email == f"prof-d-{tag}@uni.example.edu"
        events = session.scalars(select(AuditEvent.event).where(AuditEvent.login == f"prof-d-{tag}")).all()
        assert {"email_changed", "site_admin"} <= set(events)
    revoked = cli.invoke(grader_cli, ["user", "admin", f"prof-d-{tag}", "--revoke"])
    assert revoked.exit_code == 0 and "is no longer a site administrator" in revoked.output
    bad = cli.invoke(grader_cli, ["user", "email", f"prof-d-{tag}", "nope"])
    assert bad.exit_code == 2 and "is not an e-mail address" in bad.output
