"""kernelgrade as an LTI 1.3 tool, launched from a real platform (tests/peers: lti1p3platform's
logic, served on its own port) with a browser that follows the LTI forms (FormBrowser): deep
linking by the instructor, launches of a TA and students, grades sent through Assignment and
Grade Services and read back from the platform's gradebook, and each refusal the issue names
(a replayed launch, a wrong audience, an expired token, an unknown deployment, a nonce from
another launch, a stranger's signature, an identity tied to another account, a role that gives
no access)."""
from __future__ import annotations

import io
import re
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth import identities
from grader.auth.audit import Via
from grader.auth.identities import Identity, IdentityRefused, account_of, tie
from grader.celery_app import make_celery
from grader.course.adjustments import MANUAL, add_entry
from grader.db import session_scope
from grader.lti import people
from grader.lti.launch import begin_login
from grader.lti.passback import links_of, send_link_grades
from grader.lti.people import Member, person_of
from grader.lti.registry import add_platform
from grader.lti.roster_sync import sync_roster
from grader.models import (
    Assignment,
    AuditEvent,
    Course,
    CourseRole,
    Enrollment,
    ExternalIdentity,
    LtiContext,
    LtiLaunchState,
    LtiPlatform,
    Role,
    Submission,
    User,
    utcnow,
)
from grader.runs.reconcile import reconcile
from grader.settings import Settings
from tests.peers.fixtures import form_browser, lms  # noqa: F401
from tests.peers.form_browser import Form, FormBrowser
from tests.peers.lms import INSTRUCTOR, LEARNER, TEACHING_ASSISTANT, TEST_STUDENT, Link, Platform
from tests.peers.lms import Course as LmsCourse
from tests.peers.lms import User as LmsUser
from tests.service.conftest import WorkerProcess, served, sessions, settings, settings_env, worker  # noqa: F401

MENTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Mentor"


@pytest.fixture(scope="module")
def tool(settings: Settings) -> Iterator[str]:  # noqa: F811
    with served(settings) as url:
        yield url


@dataclass
class Class:
    """One LMS course with its people, registered with the tool, and a free assignment to link."""

    lms: Platform
    course: LmsCourse
    assignment: str
    people: dict[str, LmsUser]


def register(lms: Platform, tool: str, sessions: sessionmaker[Session], slug: str) -> None:  # noqa: F811
    """The tool at `tool` registered in the LMS and the LMS in the tool (what both admins enter),
    and a new assignment `slug` that no course holds yet (free to link)."""
    facts = lms.register_tool(tool)
    with session_scope(sessions) as db:
        add_platform(db, name="TestLMS", issuer=facts.issuer, client_id=facts.client_id,
                     auth_login_url=facts.auth_login_url, auth_token_url=facts.auth_token_url, jwks_url=facts.jwks_url,
                     deployment_ids=[facts.deployment_id], allow_http=True)
        db.add(Assignment(slug=slug, title=f"Kernels {slug}", total_points=100.0))


@pytest.fixture
def lms_class(lms: Platform, tool: str, sessions: sessionmaker[Session]) -> Class:  # noqa: F811
    tag = uuid.uuid4().hex[:8]
    register(lms, tool, sessions, f"lti-{tag}")
    course = lms.add_course(f"ctx-{tag}", f"Systems {tag}")
    people: dict[str, LmsUser] = {}
    for key, roles in (("instructor", INSTRUCTOR), ("ta", TEACHING_ASSISTANT), ("s1", LEARNER), ("s2", LEARNER),
                       ("s3", LEARNER), ("test", TEST_STUDENT), ("mentor", (MENTOR,))):
        user = lms.add_user(f"{key}-{tag}", f"{key.title()} Person", f"{key}-{tag}@uni.example", key.title(), "Person")
        lms.enroll(course, user, roles)
        people[key] = user
    return Class(lms, course, f"lti-{tag}", people)


def _ticket_form(page_text: str) -> tuple[str, list[str]]:
    ticket = re.search(r'name="ticket" value="([^"]+)"', page_text)
    assert ticket, page_text[:500]
    return ticket.group(1), re.findall(r'name="assignment" value="([^"]+)"', page_text)


def _deep_link(c: Class, tool: str) -> Link:
    """The instructor's deep-linking launch: the choice page, the assignment chosen, the signed
    answer posted back to the LMS (the browser follows its auto-posting form); the LMS's new link."""
    with FormBrowser() as instructor:
        chooser = instructor.open(c.lms.deep_link_url(c.people["instructor"], c.course))
        assert chooser.status_code == 200 and "Which assignment" in chooser.text, chooser.text[-800:]
        ticket, choices = _ticket_form(chooser.text)
        assert c.assignment in choices
        back = instructor.submit(Form(f"{tool}/lti/choose", "POST", {"ticket": ticket, "assignment": c.assignment}))
        assert back.status_code == 200 and "1 link(s) added" in back.text, back.text[-600:]
    (link,) = c.lms.links(c.course)
    assert link.custom == {"kernelgrade_assignment": c.assignment} and link.lineitem
    return link


def assignment_id(db: Session, slug: str) -> int:
    found = db.scalar(select(Assignment.id).where(Assignment.slug == slug))
    assert found is not None
    return found


def _launch(c: Class, who: str, link: Link) -> tuple[FormBrowser, httpx.Response]:
    return _launch_as(c, c.people[who], link)


def test_deep_link_then_launches_enroll_each_as_the_lms_says(lms_class: Class, tool: str,
                                                              sessions: sessionmaker[Session]) -> None:  # noqa: F811
    c = lms_class
    link = _deep_link(c, tool)
    landed = {}
    for who in ("instructor", "ta", "s1", "s2", "s3", "test"):
        browser, page = _launch(c, who, link)
        landed[who] = (page.status_code, str(page.url))
        browser.close()
    assert landed["s1"][0] == 200 and f"assignment={c.assignment}" in landed["s1"][1], landed
    assert "/gradebook" in landed["ta"][1] and "/gradebook" in landed["instructor"][1], landed
    with session_scope(sessions) as db:
        context = db.scalar(select(LtiContext).where(LtiContext.context_id == c.course.context_id))
        assert context is not None and context.course_id is not None
        course = db.get(Course, context.course_id)
        assert course is not None
        roles = {u.full_name: e.role for e, u in db.execute(
            select(Enrollment, User).join(User, User.id == Enrollment.user_id).where(Enrollment.course_id == course.id))}
        assert roles == {"Instructor Person": CourseRole.instructor, "Ta Person": CourseRole.ta,
                         "S1 Person": CourseRole.student, "S2 Person": CourseRole.student,
                         "S3 Person": CourseRole.student}  # the LMS's test student is enrolled nowhere
        assert db.scalar(select(Assignment.course_id).where(Assignment.slug == c.assignment)) == course.id


def test_a_role_that_gives_no_access_is_refused_and_said_so(lms_class: Class, tool: str) -> None:
    c = lms_class
    link = c.lms.add_link(c.course, "manual-1", "By hand", with_lineitem=True)
    browser, page = _launch(c, "mentor", link)
    assert page.status_code == 403 and "gives no access" in page.text


@pytest.mark.parametrize("tamper, words", [
    ("expired", "expired"), ("wrong_audience", "meant for"), ("unknown_deployment", "deployment"),
    ("wrong_nonce", "nonce"), ("bad_signature", "not signed"), ("unknown_key", "not signed"),
])
def test_a_tampered_launch_is_refused_in_words(lms_class: Class, tamper: str, words: str,
                                               sessions: sessionmaker[Session]) -> None:  # noqa: F811
    c = lms_class
    link = c.lms.add_link(c.course, f"t-{tamper}", "Tampered", with_lineitem=False)
    with session_scope(sessions) as db:
        before = db.scalar(select(ExternalIdentity.id).order_by(ExternalIdentity.id.desc()).limit(1))
    with FormBrowser() as browser:
        page = browser.open(c.lms.launch_url(c.people["s1"], link, tamper=tamper))
    assert page.status_code == 403 and words in page.text, page.text[-800:]
    with session_scope(sessions) as db:
        assert db.scalar(select(ExternalIdentity.id).order_by(ExternalIdentity.id.desc()).limit(1)) == before


def test_a_replayed_launch_is_refused(lms_class: Class) -> None:
    c = lms_class
    link = c.lms.add_link(c.course, "replay", "Replay", with_lineitem=False)
    with FormBrowser() as first:
        first.open(c.lms.launch_url(c.people["instructor"], link))
    with FormBrowser() as attacker:
        again = attacker.open(c.lms.repost_url())
    assert again.status_code == 403 and "already used" in again.text


def test_an_identity_tied_to_another_account_is_refused_and_audited(lms_class: Class,
                                                                    sessions: sessionmaker[Session]) -> None:  # noqa: F811
    c = lms_class
    s1 = c.people["s1"]
    with session_scope(sessions) as db:
        other = User(username=f"other-{uuid.uuid4().hex[:6]}", role=Role.student)
        db.add(other)
        db.flush()
        tie(db, Identity(c.lms.issuer, s1.sub, "lti"), other, Via.cli)
        mine = User(username=f"mine-{uuid.uuid4().hex[:6]}", role=other.role)
        db.add(mine)
        db.flush()
        with pytest.raises(IdentityRefused, match="tied to another account"):
            tie(db, Identity(c.lms.issuer, s1.sub, "lti"), mine, Via.lti)
        assert db.scalar(select(AuditEvent.detail).where(AuditEvent.event == "identity_refused",
                                                         AuditEvent.user_id == mine.id))


def test_grades_that_count_reach_the_lms_and_one_failure_stops_no_one(lms_class: Class, tool: str,
                                                                     settings: Settings,  # noqa: F811
                                                                     sessions: sessionmaker[Session]) -> None:  # noqa: F811
    c = lms_class
    link = _deep_link(c, tool)
    instructor, _ = _launch(c, "instructor", link)
    for who in ("ta", "s1", "s2", "s3", "test"):
        _launch(c, who, link)[0].close()
    with session_scope(sessions) as db:
        assignment = db.scalar(select(Assignment).where(Assignment.slug == c.assignment))
        assert assignment is not None
        course_slug = _course_of(db, c).slug
        staff = db.scalar(select(User).where(User.full_name == "Instructor Person")
                          .join(ExternalIdentity, ExternalIdentity.user_id == User.id)
                          .where(ExternalIdentity.issuer == c.lms.issuer))
        for who, points in (("S1 Person", 90.0), ("S2 Person", 75.5)):
            student = db.scalar(select(User).join(ExternalIdentity, ExternalIdentity.user_id == User.id)
                                .where(ExternalIdentity.issuer == c.lms.issuer, User.full_name == who))
            assert student is not None and staff is not None
            add_entry(db, assignment, student, staff, MANUAL, str(points), "graded by hand")
    c.lms.fail_scores(c.people["s1"], 1, 503)
    with session_scope(sessions) as db:
        (row,) = links_of(db, assignment_id(db, c.assignment))
        results = {r.username: r for r in send_link_grades(db, settings, row)}
    by_name = {r.status for r in results.values()}
    assert "failed" in by_name and "sent" in by_name, results
    shown = instructor.client.get(f"{tool}/courses/{course_slug}/lms").text  # the course's page says why
    failed_row = shown.split('class="send-failed"', 1)[1].split("</tr>", 1)[0]
    assert "S1 Person" in failed_row and "503" in failed_row, failed_row
    instructor.close()
    columns = c.lms.gradebook(c.course)
    scores = {s["userId"]: s["scoreGiven"] for col in columns for s in col.scores}
    assert scores.get(c.people["s2"].sub) == 75.5, columns
    assert c.people["s1"].sub not in scores
    assert c.people["test"].sub not in scores and c.people["ta"].sub not in scores
    assert all(s["gradingProgress"] == "FullyGraded" for col in columns for s in col.scores)
    with session_scope(sessions) as db:  # the failed one goes on the next send; the sent one is not sent again
        (row,) = links_of(db, assignment_id(db, c.assignment))
        again = {r.status for r in send_link_grades(db, settings, row)}
    scores = {s["userId"]: s["scoreGiven"] for col in c.lms.gradebook(c.course) for s in col.scores}
    assert scores.get(c.people["s1"].sub) == 90.0 and "unchanged" in again
    assert c.lms.token_requests == 1  # one access token for both sends, not one per score


def _course_of(db: Session, c: Class) -> Course:
    context = db.scalar(select(LtiContext).where(LtiContext.context_id == c.course.context_id))
    assert context is not None and context.course_id is not None
    course = db.get(Course, context.course_id)
    assert course is not None
    return course


def _enrolled(db: Session, c: Class) -> dict[str, tuple[CourseRole, bool]]:
    """name -> (role, dropped) in the kernelgrade course of the LMS course."""
    course = _course_of(db, c)
    return {u.full_name or u.username: (e.role, e.dropped_at is not None) for e, u in db.execute(
        select(Enrollment, User).join(User, User.id == Enrollment.user_id).where(Enrollment.course_id == course.id))}


def test_the_roster_enrolls_who_never_launched_and_marks_the_dropped(lms_class: Class, tool: str, settings: Settings,  # noqa: F811
                                                                      sessions: sessionmaker[Session]) -> None:  # noqa: F811
    c = lms_class
    c.lms.nrps_page_size = 2  # the roster comes in pages: every page is read
    _deep_link(c, tool)  # only the instructor has launched
    with session_scope(sessions) as db:
        context = db.scalar(select(LtiContext).where(LtiContext.context_id == c.course.context_id))
        assert context is not None
        first = sync_roster(db, settings, context)
    # four enrolled, and the instructor's enrollment (made with the course) given the LMS's name and e-mail
    assert len(first.enrolled) == 5 and first.dropped == [] and first.refused == [], first
    with session_scope(sessions) as db:
        assert _enrolled(db, c) == {"Instructor Person": (CourseRole.instructor, False),
                                    "Ta Person": (CourseRole.ta, False), "S1 Person": (CourseRole.student, False),
                                    "S2 Person": (CourseRole.student, False), "S3 Person": (CourseRole.student, False)}
    c.lms.drop(c.course, c.people["s3"])
    with session_scope(sessions) as db:
        context = db.scalar(select(LtiContext).where(LtiContext.context_id == c.course.context_id))
        assert context is not None
        second = sync_roster(db, settings, context)
        assert second.kept == 4 and len(second.dropped) == 1 and not second.enrolled, second
        assert _enrolled(db, c)["S3 Person"] == (CourseRole.student, True)
    # a student whom the roster enrolled launches later: the same account, no second one
    _launch(c, "s1", c.lms.add_link(c.course, "later", "Later", with_lineitem=False))[0].close()
    with session_scope(sessions) as db:
        assert db.scalar(select(func.count()).select_from(ExternalIdentity)
                         .where(ExternalIdentity.issuer == c.lms.issuer, ExternalIdentity.subject == c.people["s1"].sub)) == 1


def test_changed_grades_go_to_the_lms_by_themselves_and_the_course_page_shows_each(
        lms_class: Class, tool: str, settings: Settings, sessions: sessionmaker[Session],  # noqa: F811
        worker: WorkerProcess) -> None:  # noqa: F811
    """A manual grade is a change: the reconciler's next pass queues the link and the CPU worker
    sends it (a real Celery worker); a pass with no change queues nothing; the course's LMS page
    lists each student's result, and its button sends again."""
    c = lms_class
    link = _deep_link(c, tool)
    instructor, _ = _launch(c, "instructor", link)
    for who in ("s1", "s2"):
        _launch(c, who, link)[0].close()
    celery = make_celery(settings)
    with session_scope(sessions) as db:
        reconcile(settings, sessions, celery)  # whatever earlier tests left is queued now
        assignment = db.scalar(select(Assignment).where(Assignment.slug == c.assignment))
        staff = db.scalar(select(User).join(ExternalIdentity, ExternalIdentity.user_id == User.id)
                          .where(ExternalIdentity.issuer == c.lms.issuer, User.full_name == "Instructor Person"))
        student = db.scalar(select(User).join(ExternalIdentity, ExternalIdentity.user_id == User.id)
                            .where(ExternalIdentity.issuer == c.lms.issuer, User.full_name == "S1 Person"))
        assert assignment is not None and staff is not None and student is not None
        add_entry(db, assignment, student, staff, MANUAL, "88", "graded by hand")
        course_slug = _course_of(db, c).slug
    report = reconcile(settings, sessions, celery)
    with session_scope(sessions) as db:
        (row,) = links_of(db, assignment_id(db, c.assignment))
        assert row.id in report.grade_sends
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not _score_of(c, "s1"):
        time.sleep(0.5)
    assert _score_of(c, "s1") == 88.0, worker.log()
    assert row.id not in reconcile(settings, sessions, celery).grade_sends  # nothing changed since
    page = instructor.client.get(f"{tool}/courses/{course_slug}/lms")
    assert page.status_code == 200 and 'class="send-sent"' in page.text and "never launched" not in page.text
    assert "no grade yet" in page.text  # s2 has none: skipped, and said why
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token
    sent = instructor.client.post(f"{tool}/courses/{course_slug}/lms/grades",
                                  data={"csrf_token": token.group(1), "link": str(row.id), "resend": "1"},
                                  follow_redirects=False)
    assert sent.status_code == 303 and sent.headers["location"].endswith("?queued=grades")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(_scores_of(c, "s1")) < 2:
        time.sleep(0.5)
    assert len(_scores_of(c, "s1")) == 2, worker.log()  # every grade again, as asked
    instructor.close()


def _scores_of(c: Class, who: str) -> list[float]:
    return [s["scoreGiven"] for col in c.lms.gradebook(c.course) for s in col.scores
            if s["userId"] == c.people[who].sub]


def _score_of(c: Class, who: str) -> float | None:
    scores = _scores_of(c, who)
    return scores[-1] if scores else None


def test_site_administrators_see_the_registrations_and_the_tools_addresses(lms_class: Class, tool: str,
                                                                            sessions: sessionmaker[Session]) -> None:  # noqa: F811
    c = lms_class
    link = _deep_link(c, tool)
    instructor, _ = _launch(c, "instructor", link)
    refused = instructor.client.get(f"{tool}/ops/lti")
    assert refused.status_code == 403 and "Only a site administrator" in refused.text
    with session_scope(sessions) as db:
        person = db.scalar(select(User).join(ExternalIdentity, ExternalIdentity.user_id == User.id)
                           .where(ExternalIdentity.issuer == c.lms.issuer, User.full_name == "Instructor Person"))
        assert person is not None
        person.site_admin = True
    shown = instructor.client.get(f"{tool}/ops/lti")
    assert shown.status_code == 200 and c.lms.issuer in shown.text and f"{tool}/lti/launch" in shown.text
    assert c.lms.registered()[0].deployment_id in shown.text
    instructor.close()


def test_a_student_launched_from_the_lms_uploads_as_themselves(lms_class: Class, tool: str,
                                                               sessions: sessionmaker[Session]) -> None:  # noqa: F811
    """The launch's session is a login like any other: the upload form takes the student's zip
    and stores it as theirs (grading paused here: the assignment of these tests has no rubric)."""
    c = lms_class
    link = _deep_link(c, tool)
    with session_scope(sessions) as db:
        assignment = db.scalar(select(Assignment).where(Assignment.slug == c.assignment))
        assert assignment is not None
        assignment.grading_paused = True
    student, landed = _launch(c, "s1", link)
    token = re.search(r'name="csrf_token" value="([^"]+)"', landed.text)
    assert token, landed.text[-500:]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("llmsys_hw4/src/softmax_kernel.cu", "// mine\n")
    sent = student.client.post(f"{tool}/submit", data={"csrf_token": token.group(1), "assignment": c.assignment},
                               files={"file": ("mine.zip", archive.getvalue(), "application/zip")},
                               follow_redirects=False)
    assert sent.status_code == 303 and sent.headers["location"].startswith("/runs/"), sent.text[-500:]
    with session_scope(sessions) as db:
        owner = db.scalar(select(User.full_name).join(Submission, Submission.user_id == User.id)
                          .join(Assignment, Assignment.id == Submission.assignment_id)
                          .where(Assignment.slug == c.assignment))
    assert owner == "S1 Person"
    student.close()


def test_the_course_rosters_sis_id_finds_the_account_and_a_second_lms_identity_is_refused(
        lms_class: Class, tool: str, sessions: sessionmaker[Session]) -> None:  # noqa: F811
    """A student the course's roster import made (its SIS User ID on their enrollment) gets that
    account at their first launch, by the university's id, not by name or e-mail; another LMS
    person with the same SIS id is refused (the account keeps one identity of this LMS), and the
    refusal is audited."""
    c = lms_class
    link = _deep_link(c, tool)
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as db:
        course = _course_of(db, c)
        imported = User(username=f"imported-{tag}", role=Role.student, full_name="Ima Ported")
        db.add(imported)
        db.flush()
        db.add(Enrollment(user_id=imported.id, course_id=course.id, role=CourseRole.student, sis_user_id=f"S-{tag}"))
    first = c.lms.add_user(f"first-{tag}", "Ima Ported", f"other-{tag}@uni.example", "Ima", "Ported", sis_id=f"S-{tag}")
    c.lms.enroll(c.course, first, LEARNER)
    browser, page = _launch_as(c, first, link)
    browser.close()
    assert page.status_code == 200 and f"assignment={c.assignment}" in str(page.url)
    with session_scope(sessions) as db:
        tied = db.scalar(select(ExternalIdentity.user_id).where(ExternalIdentity.issuer == c.lms.issuer,
                                                                ExternalIdentity.subject == first.sub))
        assert tied == imported.id
    second = c.lms.add_user(f"second-{tag}", "Someone Else", f"else-{tag}@uni.example", "Some", "Else", sis_id=f"S-{tag}")
    c.lms.enroll(c.course, second, LEARNER)
    browser, page = _launch_as(c, second, link)
    browser.close()
    assert page.status_code == 403 and "tied to another" in page.text
    with session_scope(sessions) as db:
        assert db.scalar(select(AuditEvent.detail).where(AuditEvent.event == "identity_refused",
                                                         AuditEvent.user_id == imported.id))
        assert db.scalar(select(ExternalIdentity.id).where(ExternalIdentity.subject == second.sub)) is None


def _launch_as(c: Class, person: LmsUser, link: Link) -> tuple[FormBrowser, httpx.Response]:
    browser = FormBrowser()
    return browser, browser.open(c.lms.launch_url(person, link))


def test_login_states_a_day_past_their_expiry_are_removed(lms_class: Class, sessions: sessionmaker[Session]) -> None:  # noqa: F811
    c = lms_class
    with session_scope(sessions) as db:
        platform = db.scalar(select(LtiPlatform).where(LtiPlatform.issuer == c.lms.issuer))
        assert platform is not None
        old, recent = (LtiLaunchState(state_hash=uuid.uuid4().hex, nonce=uuid.uuid4().hex, platform_id=platform.id,
                                      expires_at=utcnow() - age) for age in (timedelta(days=2), timedelta(hours=1)))
        db.add_all([old, recent])
        db.flush()
        ids = (old.id, recent.id)
        redirect = begin_login(db, {"iss": c.lms.issuer, "login_hint": "x"}, "http://tool.example/lti/launch")
        assert redirect.startswith(platform.auth_login_url)
    with session_scope(sessions) as db:
        assert db.get(LtiLaunchState, ids[0]) is None and db.get(LtiLaunchState, ids[1]) is not None


def test_two_first_launches_of_one_person_at_once_make_one_account(lms_class: Class, sessions: sessionmaker[Session],  # noqa: F811
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: this launch looked the identity up before the same person's other launch, at the
    same instant, made their account and tied it. Its own new account and the refusal it met are
    undone, and it logs in to the other launch's account: one person, one account, no error."""
    c = lms_class
    s1 = c.people["s1"]
    with session_scope(sessions) as db:
        platform = db.scalar(select(LtiPlatform).where(LtiPlatform.issuer == c.lms.issuer))
        assert platform is not None
        first = person_of(db, platform, Member(s1.sub, "S1 Person", None, None, LEARNER), None, CourseRole.student)
        users_before = db.scalar(select(func.count()).select_from(User))
    calls: list[Identity] = []

    def late_lookup(db: Session, identity: Identity) -> User | None:
        calls.append(identity)  # the first lookup, before the other launch committed, sees nothing
        return None if len(calls) == 1 else account_of(db, identity)
    monkeypatch.setattr(people, "account_of", late_lookup)
    with session_scope(sessions) as db:
        platform = db.scalar(select(LtiPlatform).where(LtiPlatform.issuer == c.lms.issuer))
        assert platform is not None
        second = person_of(db, platform, Member(s1.sub, "S1 Person", None, None, LEARNER), None, CourseRole.student)
        assert second.id == first.id and len(calls) == 1
    with session_scope(sessions) as db:
        assert db.scalar(select(func.count()).select_from(User)) == users_before
        assert not db.scalar(select(AuditEvent.id).where(AuditEvent.event == "identity_refused",
                                                         AuditEvent.detail.contains(s1.sub)))


def test_a_first_launch_and_a_roster_sync_tying_one_person_at_once_tie_them_once(
        lms_class: Class, sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The race: an instructor's launch queued a roster sync, which tied a student to the account
    of their SIS id while that student's own first launch was tying them the same way. The launch
    found no tie, then met the sync's row at its insert: it reads the tie again and goes on as
    that account, with no error page and one tie."""
    c = lms_class
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as db:
        course = Course(slug=f"raced-{tag}", title="A course the LMS links")
        imported = User(username=f"raced-{tag}", role=Role.student)
        db.add(course)
        db.add(imported)
        db.flush()
        imported_id, course_id = imported.id, course.id
        db.add(Enrollment(user_id=imported_id, course_id=course_id, role=CourseRole.student, sis_user_id=f"S-{tag}"))
    member = Member(f"raced-{tag}", "Ra Ced", None, f"S-{tag}", (LEARNER,))

    def person(db: Session) -> User:
        platform = db.scalar(select(LtiPlatform).where(LtiPlatform.issuer == c.lms.issuer))
        course = db.get(Course, course_id)
        assert platform is not None and course is not None
        return person_of(db, platform, member, course, CourseRole.student)
    checked = identities._tied_to
    synced: list[int] = []

    def the_sync_ties_meanwhile(db: Session, identity: Identity, user: User, via: Via) -> bool:
        found = checked(db, identity, user, via)
        if not synced:  # the launch saw no tie; the roster sync ties and commits before its insert
            synced.append(0)
            with session_scope(sessions) as other:
                synced[0] = person(other).id
        return found
    monkeypatch.setattr(identities, "_tied_to", the_sync_ties_meanwhile)
    with session_scope(sessions) as db:
        assert person(db).id == imported_id
    assert synced == [imported_id]
    with session_scope(sessions) as db:
        assert db.scalars(select(ExternalIdentity.user_id).where(ExternalIdentity.subject == member.subject)).all() == [imported_id]
        assert db.scalar(select(func.count()).select_from(AuditEvent).where(
            AuditEvent.event == "identity_linked", AuditEvent.detail.contains(member.subject))) == 1
