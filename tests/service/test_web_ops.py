"""The course-operations pages on PostgreSQL and Redis: who may use them (staff only, CSRF on
every form), the settings form at its boundaries, members (a TA made and taken out),
extensions as admission and the late penalty see them, pausing (nothing sent, not even by
the reconciler), draining and resuming grading, re-grading from the controls without losing
a grade, and the GPU model on the run page with the gradebook's mark for a GPU model without
a stored calibration."""
from __future__ import annotations

import io
import re
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.cli.main import app as grader_cli
from grader.course.deadlines import LateStatus
from grader.course.membership import get_or_create_user, role_in
from grader.course.policies import admission, late_policy, lateness
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import (
    Assignment,
    CourseRole,
    ErrorClass,
    Extension,
    GpuCalibration,
    ProblemResult,
    Role,
    Run,
    RunState,
    Submission,
    User,
    utcnow,
)
from grader.models import Course as CourseRow
from grader.passwords import set_password
from grader.runs.reconcile import forgotten_runs
from grader.service import get_assignment
from grader.settings import Settings, get_settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import drop_queues, queued_messages
from tests.service.test_web_confirmations import confirmed
from tests.service.test_web_settings import PASSWORD, Browser


@dataclass
class Course:
    slug: str
    prof: str
    students: list[str]
    settings: Settings  # with a task queue of its own, so nothing sent here reaches a worker


@pytest.fixture(scope="module")
def course(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Course]:
    tag = uuid.uuid4().hex[:6]
    slug = f"ops-{tag}"
    with session_scope(sessions) as session:
        session.add(Assignment(slug=slug, title="Ops test", course=CourseRow(slug=slug, title="Ops test"), total_points=100))
        session.flush()  # created first: new accounts join every course there is
        prof = get_or_create_user(session, f"ops-prof-{tag}", Role.instructor)
        students = [get_or_create_user(session, f"ops-stu{i}-{tag}", Role.student) for i in range(4)]
        for user in (prof, *students):
            set_password(user, PASSWORD, SUITE_ARGON2)
        names = [s.username for s in students]
    own = settings.model_copy(update={"task_queue": f"kg-ops-{tag}"})
    yield Course(slug, prof.username, names, own)
    drop_queues(own.task_queue)
    _end_queued_runs(sessions, slug)  # nothing of this course stays queued for other tests


def _end_queued_runs(sessions: sessionmaker[Session], slug: str) -> None:
    """As if a worker had finished every queued run of `slug` (none runs on this queue)."""
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.state == RunState.queued, Run.submission_id.in_(
            select(Submission.id).join(Assignment).where(Assignment.slug == slug))).values(
            state=RunState.failed, error_class=ErrorClass.infra_error, finished_at=utcnow()))


@pytest.fixture(scope="module")
def prof(course: Course) -> Browser:
    return Browser(course.settings, course.prof)


@pytest.fixture(scope="module")
def student(course: Course) -> Browser:
    return Browser(course.settings, course.students[0])


def _stored(sessions: sessionmaker[Session], slug: str) -> tuple:
    with session_scope(sessions) as session:
        row = get_assignment(session, slug)
        return late_policy(row), row.score_policy, row.grading_paused


# ---- who may use the pages ----------------------------------------------------------------


def test_pages_are_for_the_courses_staff(course: Course, prof: Browser, student: Browser,
                                         sessions: sessionmaker[Session]) -> None:
    pages = [f"/assignments/{course.slug}/{page}" for page in ("settings", "grading", "similarity")]
    anonymous = TestClient(create_app(course.settings))
    for path in [*pages, f"/courses/{course.slug}/members"]:
        assert prof.client.get(path).status_code == 200
        denied = student.client.get(path)  # a student of the course: a 403 page saying who may
        assert denied.status_code == 403 and "you are a student there" in denied.text, path
        refused = anonymous.get(path, follow_redirects=False)
        assert refused.status_code == 303 and refused.headers["location"] == f"/login?next={quote(path, safe='')}"
    before = _stored(sessions, course.slug)
    student_token = student.page_csrf("/")
    posts = {f"/assignments/{course.slug}/settings": {"due": "2030-01-01T00:00:00"},
             f"/assignments/{course.slug}/grading": {"action": "pause"},
             f"/assignments/{course.slug}/extensions": {"student": course.students[0], "extra": "9d"},
             f"/courses/{course.slug}/members": {"username": course.students[0], "part": "ta"}}
    for path, data in posts.items():
        assert student.client.post(path, data={**data, "csrf_token": student_token}).status_code == 403
        no_token = prof.client.post(path, data=data)
        assert no_token.status_code == 403 and "not sent from a current kernelgrade page" in no_token.text
        wrong = prof.client.post(path, data={**data, "csrf_token": student_token})
        assert wrong.status_code == 403
    assert _stored(sessions, course.slug) == before
    assert _part(sessions, course.slug, course.students[0]) is CourseRole.student
    with session_scope(sessions) as session:
        assert not session.scalars(select(Extension).join(Assignment).where(Assignment.slug == course.slug)).all()
    assert f'href="/courses/{course.slug}"' in prof.client.get("/courses").text
    assert course.slug not in student.client.get("/courses").text


def _part(sessions: sessionmaker[Session], slug: str, username: str) -> CourseRole | None:
    with session_scope(sessions) as session:
        user = session.scalars(select(User).where(User.username == username)).one()
        return role_in(session, user.id, get_assignment(session, slug).id)


# ---- settings -----------------------------------------------------------------------------


def _save(prof: Browser, course: Course, **fields: str):
    data = {"release": "", "due": "", "grace": "", "late_window": "", "penalty_per_day": "",
            "score_policy": "latest", **fields}
    data["csrf_token"] = prof.page_csrf(f"/assignments/{course.slug}/settings")
    return prof.client.post(f"/assignments/{course.slug}/settings", data=data, follow_redirects=False)


def test_settings_form_saves_the_schedule(course: Course, prof: Browser, sessions: sessionmaker[Session]) -> None:
    response = _save(prof, course, release="2026-03-02T10:00", due="2026-03-19T23:59:59", grace="2h",
                     late_window="3d", penalty_per_day="10%", score_policy="best")
    assert response.status_code == 303
    policy, score_policy, _ = _stored(sessions, course.slug)
    assert policy.release_at.isoformat() == "2026-03-02T10:00:00+00:00"  # the course's zone: UTC here
    assert policy.due_at.isoformat() == "2026-03-19T23:59:59+00:00"
    assert (policy.grace, policy.late_window, policy.penalty_per_day) == (timedelta(hours=2), timedelta(days=3), 0.1)
    assert score_policy == "best"
    page = prof.client.get(response.headers["location"]).text
    for value in ('value="2026-03-02T10:00:00"', 'value="2026-03-19T23:59:59"', 'value="2h"', 'value="3d"',
                  'value="10%"', '<option value="best" selected>', "Schedule saved."):
        assert value in page
    # Release and due in the same second is allowed; blank fields mean none.
    assert _save(prof, course, release="2026-03-19T23:59:59", due="2026-03-19T23:59:59").status_code == 303
    policy, score_policy, _ = _stored(sessions, course.slug)
    assert policy.release_at == policy.due_at and policy.grace == timedelta(0) and policy.penalty_per_day == 0.0
    assert score_policy == "latest"


def test_release_and_due_are_date_and_time_fields_in_the_named_zone(course: Course, prof: Browser,
                                                                   sessions: sessionmaker[Session]) -> None:
    """A browser's date-time picker, to the second, labelled with the course's zone (UTC in
    these tests) and its offset now; a value without seconds (what the picker sends when they
    are zero) is that minute's first second in the zone."""
    page = prof.client.get(f"/assignments/{course.slug}/settings").text
    for name, label in (("release", "Release"), ("due", "Due")):
        assert f'<label for="s-{name}">{label} (UTC time)</label>' in page
        assert re.search(rf'<input id="s-{name}" name="{name}" type="datetime-local" step="1" value="[-\d:T]*"', page)
    assert re.search(r'id="zone-hint">Dates and times are in the course\'s time zone, <strong>UTC</strong> '
                     r"\(UTC, UTC\+00:00 now\)", page)
    assert _save(prof, course, due="2026-03-19T23:59").status_code == 303
    policy, _, _ = _stored(sessions, course.slug)
    assert policy.due_at.isoformat() == "2026-03-19T23:59:00+00:00"
    assert 'value="2026-03-19T23:59:00"' in prof.client.get(f"/assignments/{course.slug}/settings").text


@pytest.mark.parametrize("fields, field, message", [
    ({"due": "2026-02-30T10:00"}, "due", "is not a date and time"),
    ({"release": "next monday"}, "release", "is not a date and time"),
    ({"release": "2026-03-20T00:00:00", "due": "2026-03-19T23:59:59"}, "", "The due date is before the release date."),
    ({"grace": "3 weeks"}, "grace", "is not a duration"),
    ({"grace": "2d", "late_window": "1d"}, "", "cannot be shorter than the grace"),
    ({"penalty_per_day": "150%"}, "", "between 0 and 1"),
    ({"penalty_per_day": "a lot"}, "penalty_per_day", "is not a penalty"),
    ({"score_policy": "average"}, "score_policy", "The score policy is one of: latest, best."),
])
def test_settings_form_refuses_bad_values_and_keeps_the_schedule(course: Course, prof: Browser,
                                                                 sessions: sessionmaker[Session], fields: dict,
                                                                 field: str, message: str) -> None:
    assert _save(prof, course, due="2026-04-01T12:00:00", late_window="1d").status_code == 303
    before = _stored(sessions, course.slug)
    response = _save(prof, course, **{"due": "2026-04-01T12:00:00", "late_window": "1d", **fields})
    assert response.status_code == 400
    errors = re.search(r'<div role="alert" id="schedule-errors">(.*?)</div>', response.text, re.S)
    assert errors and message in errors.group(1)
    if field:  # the field is marked, and keeps what was typed
        assert re.search(rf'id="s-{field}"[^>]*aria-invalid="true"', response.text.replace("\n", " "))
        assert f'id="e-{field}"' in response.text
        if field != "score_policy":
            assert f'value="{fields[field]}"' in response.text
    assert _stored(sessions, course.slug) == before


# ---- members ------------------------------------------------------------------------------


def _members_post(prof: Browser, course: Course, suffix: str = "", **data: str):
    token = prof.page_csrf(f"/courses/{course.slug}/members")
    return prof.client.post(f"/courses/{course.slug}/members{suffix}", data={"csrf_token": token, **data},
                            follow_redirects=False)


def test_members_page_makes_a_ta_and_takes_them_out(course: Course, prof: Browser,
                                                    sessions: sessionmaker[Session]) -> None:
    """A student account made a TA reaches the gradebook but not the instructors' pages; taken
    out, it no longer sees the course at all. Unknown accounts, unknown parts and one's own part
    are refused."""
    ta = f"ops-ta-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        account = get_or_create_user(session, ta, Role.student)  # joins every course as a student
        set_password(account, PASSWORD, SUITE_ARGON2)
        session.flush()
        entry = entry_of(session, account.id, session.scalar(select(CourseRow.id).where(CourseRow.slug == course.slug)))
        assert entry is not None
        entry.full_name, entry.section = "Tess Assistant", "B"  # as the course's roster import sets them
    ta_browser = Browser(course.settings, ta)
    gradebook, settings_page = f"/gradebook?assignment={course.slug}", f"/assignments/{course.slug}/settings"
    assert ta_browser.client.get(gradebook).status_code == 403

    made = _members_post(prof, course, username=ta, part="ta")
    assert made.status_code == 303 and made.headers["location"] == f"/courses/{course.slug}/members?saved={ta}"
    assert _part(sessions, course.slug, ta) is CourseRole.ta
    listing = prof.client.get(made.headers["location"]).text
    assert re.search(rf"<th scope=\"row\">{ta}</th>\s*<td>TA</td>\s*<td>Tess Assistant</td>\s*<td>B</td>", listing), listing
    assert ta_browser.client.get(gradebook).status_code == 200
    refused = ta_browser.client.get(settings_page)
    assert refused.status_code == 403 and "and the TAs they allow, change the schedule" in refused.text
    assert course.slug in ta_browser.client.get("/").text

    removed = _members_post(prof, course, f"/{ta}/remove", confirm="remove")
    assert removed.status_code == 303 and _part(sessions, course.slug, ta) is None
    assert ta_browser.client.get(gradebook).status_code == 404
    assert course.slug not in ta_browser.client.get("/").text  # the upload form no longer offers it
    assert ta not in prof.client.get(f"/courses/{course.slug}/members").text
    assert _members_post(prof, course, f"/{ta}/remove", confirm="remove").status_code == 303  # twice: nothing left

    unknown = _members_post(prof, course, username=f"nobody-{ta}", part="student")
    assert unknown.status_code == 400 and "No account" in unknown.text
    bad_part = _members_post(prof, course, username=ta, part="owner")
    assert bad_part.status_code == 400 and _part(sessions, course.slug, ta) is None
    for own in (_members_post(prof, course, username=course.prof, part="student"),
                _members_post(prof, course, f"/{course.prof}/remove")):
        assert own.status_code == 400 and "cannot change your own part" in own.text
    assert _part(sessions, course.slug, course.prof) is CourseRole.instructor


# ---- extensions ---------------------------------------------------------------------------

def minimal_zip() -> bytes:
    """A small zip of its own each time: the same bytes again within the re-send window would be
    answered with the earlier submission, not stored (or refused) as another upload."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("llmsys_hw4/README", f"hi {uuid.uuid4().hex}")
    return buf.getvalue()


def _upload(browser: Browser, course: Course):
    token = browser.page_csrf("/")
    return browser.client.post("/submit", data={"csrf_token": token, "assignment": course.slug},
                               files={"file": ("hw.zip", minimal_zip(), "application/zip")}, follow_redirects=False)


def _extend(prof: Browser, course: Course, student: str, extra: str, reason: str = ""):
    token = prof.page_csrf(f"/assignments/{course.slug}/settings")
    return prof.client.post(f"/assignments/{course.slug}/extensions",
                            data={"csrf_token": token, "student": student, "extra": extra, "reason": reason},
                            follow_redirects=False)


def test_extensions_change_admission_and_the_late_penalty(course: Course, prof: Browser, settings: Settings,
                                                          sessions: sessionmaker[Session]) -> None:
    late_one = course.students[1]
    due = (utcnow() - timedelta(days=4)).replace(microsecond=0)
    assert _save(prof, course, due=due.isoformat(), late_window="3d", penalty_per_day="10%").status_code == 303
    uploader = Browser(course.settings, late_one)
    refused = _upload(uploader, course)
    assert refused.status_code == 403 and f"Uploads to {course.slug} closed at " in refused.text

    assert _extend(prof, course, "nobody-here", "2d").status_code == 400
    bad = _extend(prof, course, late_one, "two days")
    assert bad.status_code == 400 and "is not a duration" in bad.text
    response = _extend(prof, course, late_one, "5d", "flu")
    assert response.status_code == 303
    page = prof.client.get(f"/assignments/{course.slug}/settings").text
    row = re.search(rf"<th scope=\"row\">{late_one}</th>(.*?)</tr>", page, re.S)
    assert row and "5d" in row.group(1) and "flu" in row.group(1)
    assert (due + timedelta(days=5)).strftime("%Y-%m-%d %H:%M:%S") in row.group(1)
    now = utcnow()
    with session_scope(sessions) as session:
        assignment = get_assignment(session, course.slug)
        user = get_or_create_user(session, late_one, Role.student)
        assert admission(session, settings, user, assignment, now) is None
        assert lateness(session, assignment, user.id, now, settings).status is LateStatus.on_time
        # 6 days after the due time: 1 day past the extended due, so one started day off
        a_day_late = lateness(session, assignment, user.id, due + timedelta(days=6), settings)
        assert a_day_late.status is LateStatus.late and a_day_late.multiplier == pytest.approx(0.9)
    accepted = _upload(uploader, course)
    assert accepted.status_code == 303 and accepted.headers["location"].startswith("/runs/")

    # A new extension replaces it; removing it closes the window again.
    assert _extend(prof, course, late_one, "2d").status_code == 303
    with session_scope(sessions) as session:
        assignment = get_assignment(session, course.slug)
        user = get_or_create_user(session, late_one, Role.student)
        assert lateness(session, assignment, user.id, now, settings).status is LateStatus.late
    token = prof.page_csrf(f"/assignments/{course.slug}/settings")
    removed = prof.client.post(f"/assignments/{course.slug}/extensions/{late_one}/remove",
                               data={"csrf_token": token, "confirm": "remove"}, follow_redirects=False)
    assert removed.status_code == 303
    assert "No student has an extension." in prof.client.get(f"/assignments/{course.slug}/settings").text
    with session_scope(sessions) as session:
        assignment = get_assignment(session, course.slug)
        user = get_or_create_user(session, late_one, Role.student)
        refusal = admission(session, settings, user, assignment, utcnow())
        assert refusal is not None and refusal.code == "closed"
    assert _upload(uploader, course).status_code == 403
    assert _save(prof, course).status_code == 303  # no schedule for the tests below


# ---- grading controls ---------------------------------------------------------------------


def _runs_of(sessions: sessionmaker[Session], username: str) -> list[Run]:
    with session_scope(sessions) as session:
        runs = session.scalars(select(Run).join(Submission).join(User).where(User.username == username)
                               .order_by(Run.id)).all()
        session.expunge_all()
        return list(runs)


def _grading(prof: Browser, course: Course, action: str):
    token = prof.page_csrf(f"/assignments/{course.slug}/grading")
    return prof.client.post(f"/assignments/{course.slug}/grading",  # `confirm`: as the confirmation page sends
                            data={"csrf_token": token, "action": action, "confirm": action}, follow_redirects=False)


def test_pause_holds_every_dispatch_and_resume_sends(course: Course, prof: Browser,
                                                     sessions: sessionmaker[Session]) -> None:
    waiting_one = course.students[2]
    sent_before = len(queued_messages(course.settings.task_queue))  # the upload accepted above
    _end_queued_runs(sessions, course.slug)
    assert _grading(prof, course, "pause").status_code == 303
    assert _stored(sessions, course.slug)[2] is True
    response = _upload(Browser(course.settings, waiting_one), course)
    assert response.status_code == 303
    run = _runs_of(sessions, waiting_one)[-1]
    assert run.state is RunState.queued and run.enqueued_at is None
    assert len(queued_messages(course.settings.task_queue)) == sent_before
    run_page = prof.client.get(f"/runs/{run.id}").text
    assert "paused grading of this assignment" in run_page
    with session_scope(sessions) as session:  # what the reconciler would send (other tests' runs too)
        assert run.id not in forgotten_runs(session, course.settings)
    assert _runs_of(sessions, waiting_one)[-1].enqueued_at is None
    assert len(queued_messages(course.settings.task_queue)) == sent_before

    page = prof.client.get(f"/assignments/{course.slug}/grading").text
    assert 'id="grading-mode">paused<' in page and 'id="drained"' in page
    assert "1 run waiting to be sent (held by the pause)" in page

    # Something already in flight is listed while it drains.
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.id == run.id).values(state=RunState.building, started_at=utcnow()))
    page = prof.client.get(f"/assignments/{course.slug}/grading").text
    assert 'id="drained"' not in page and f"Run {run.id}</a>" in page and "building" in page
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.id == run.id).values(state=RunState.queued, started_at=None))

    resumed = _grading(prof, course, "resume")
    assert resumed.status_code == 303 and resumed.headers["location"].endswith("?sent=1")
    assert _runs_of(sessions, waiting_one)[-1].enqueued_at is not None
    assert len(queued_messages(course.settings.task_queue)) == sent_before + 1
    page = prof.client.get(resumed.headers["location"]).text
    assert 'id="grading-mode">running<' in page and "1 run sent now" in page and f"Run {run.id}</a>" in page


def test_pause_and_resume_from_the_command_line(course: Course, prof: Browser, sessions: sessionmaker[Session],
                                                settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    waiting_one = course.students[3]
    _end_queued_runs(sessions, course.slug)
    for key, value in {**settings_env, "KG_TASK_QUEUE": course.settings.task_queue}.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        paused = CliRunner().invoke(grader_cli, ["pause", course.slug])
        assert paused.exit_code == 0, paused.output
        assert f"{course.slug}: paused; 0 run(s) in flight" in paused.output
        assert _stored(sessions, course.slug)[2] is True
        sent_before = len(queued_messages(course.settings.task_queue))
        with session_scope(sessions) as session:
            token = issue_token(session, get_or_create_user(session, waiting_one, Role.student), "ops-cli")
        with TestClient(create_app(course.settings)) as api:
            stored = api.post("/api/v1/submissions", headers={"Authorization": f"Bearer {token}"},
                              data={"assignment": course.slug}, files={"file": ("hw.zip", minimal_zip())})
        assert stored.status_code == 201, stored.text
        assert "paused grading of this assignment" in stored.json()["message"]  # not "your earlier run"
        assert _runs_of(sessions, waiting_one)[-1].enqueued_at is None  # held by the pause
        resumed = CliRunner().invoke(grader_cli, ["resume", course.slug])
        assert resumed.exit_code == 0, resumed.output
        assert f"{course.slug}: resumed; sent 1 run(s)" in resumed.output
        assert _stored(sessions, course.slug)[2] is False
        assert _runs_of(sessions, waiting_one)[-1].enqueued_at is not None
        assert len(queued_messages(course.settings.task_queue)) == sent_before + 1
        unknown = CliRunner().invoke(grader_cli, ["pause", "no-such-assignment"])
        assert unknown.exit_code == 2 and "grader migrate" in unknown.output
    finally:
        get_settings.cache_clear()


def test_regrade_all_from_the_controls_never_loses_a_grade(course: Course, prof: Browser,
                                                           sessions: sessionmaker[Session]) -> None:
    graded = course.students[3]
    with session_scope(sessions) as session:
        user = get_or_create_user(session, graded, Role.student)
        sub = Submission(user=user, assignment=get_assignment(session, course.slug), original_filename="hw.zip",
                         size_bytes=1, sha256=uuid.uuid4().hex * 2)
        session.add_all([sub, Run(submission=sub, state=RunState.scored, score=70.0, finished_at=utcnow())])
    assert _grading(prof, course, "pause").status_code == 303
    page = prof.client.get(f"/assignments/{course.slug}/grading").text
    form = re.search(r'<form method="get" action="/gradebook/regrade".*?</form>', page, re.S)
    assert form and 'value="latest"' in form.group(0)
    _shown, response = confirmed(prof, "/gradebook/regrade", {
        "csrf_token": Browser.csrf(page), "assignment": course.slug, "which": "latest"})
    assert response.status_code == 303 and "queued=" in response.headers["location"]
    regrade = _runs_of(sessions, graded)[-1]
    assert regrade.reason == "regrade" and regrade.state is RunState.queued and regrade.enqueued_at is None
    with session_scope(sessions) as session:  # the re-grade fails on infrastructure
        session.execute(update(Run).where(Run.id == regrade.id).values(
            state=RunState.failed, error_class=ErrorClass.infra_error, finished_at=utcnow()))
    book = prof.client.get(f"/gradebook.json?assignment={course.slug}").json()
    assert next(r for r in book["rows"] if r["user"] == graded)["total"] == 70.0
    assert _grading(prof, course, "resume").status_code == 303


# ---- GPU model ----------------------------------------------------------------------------


def _scored_on(session: Session, username: str, slug: str, gpu: str | None, score: float) -> int:
    user = get_or_create_user(session, username, Role.student)
    sub = Submission(user=user, assignment=get_assignment(session, slug), original_filename="hw.zip",
                     size_bytes=1, sha256=uuid.uuid4().hex * 2)
    run = Run(submission=sub, state=RunState.scored if gpu else RunState.built, score=score if gpu else None,
              finished_at=utcnow())
    telemetry = {"before": {"available": True, "name": gpu}} if gpu else {}
    run.results = [ProblemResult(problem_id="1.1", title="Softmax forward", status="passed", points=score / 5,
                                 max_points=20, details={"measurement": {"telemetry": telemetry}}),
                   ProblemResult(problem_id="3", title="Problem 3", status="passed", points=1, max_points=20,
                                 details={"measurement": {"telemetry": {"gpu_before": {"name": gpu}} if gpu else {}}})]
    session.add_all([sub, run])
    session.flush()
    return run.id


def test_gpu_model_on_the_run_page_and_uncalibrated_mark_in_the_gradebook(course: Course, prof: Browser,
                                                                          sessions: sessionmaker[Session]) -> None:
    tag = uuid.uuid4().hex[:4]
    with session_scope(sessions) as session:
        assignment = get_assignment(session, course.slug)
        session.add(GpuCalibration(assignment_id=assignment.id, gpu_name="NVIDIA H200", targets={"1.1": 2.0},
                                   margin=0.85))
        on_h200 = _scored_on(session, course.students[0], course.slug, "NVIDIA H200", 90.0)
        on_t4 = _scored_on(session, course.students[1], course.slug, f"Tesla T4 {tag}", 60.0)
        no_gpu = _scored_on(session, course.students[2], course.slug, None, 0.0)
    page = prof.client.get(f"/runs/{on_t4}").text
    gpu_line = re.search(r'<p id="run-gpu">(.*?)</p>', page, re.S).group(1)
    assert f"<strong>Tesla T4 {tag}</strong>" in gpu_line and "no stored calibration" in gpu_line
    gpu_line = re.search(r'<p id="run-gpu">(.*?)</p>', prof.client.get(f"/runs/{on_h200}").text, re.S).group(1)
    assert "<strong>NVIDIA H200</strong>" in gpu_line and "no stored calibration" not in gpu_line
    assert "none (not run on a GPU)" in prof.client.get(f"/runs/{no_gpu}").text
    status = prof.client.get(f"/runs/{on_t4}/status").json()
    assert status["gpu_model"] == f"Tesla T4 {tag}" and status["gpu_calibrated"] is False

    book = prof.client.get(f"/gradebook?assignment={course.slug}").text
    rows = {m.group(1): m.group(2) for m in re.finditer(r'<th scope="row">([^<]+)</th>(.*?)</tr>', book, re.S)}
    assert f"uncalibrated GPU: Tesla T4 {tag}" in rows[course.students[1]]
    assert "uncalibrated GPU" not in rows[course.students[0]]
    # Said once, above the table, naming the model; not in red on every row.
    banner = re.search(r'<p class="notice" id="calibration-banner">(.*?)</p>', book, re.S)
    assert banner is not None and f"no stored calibration (Tesla T4 {tag})" in " ".join(banner.group(1).split())
    assert book.count('class="flag') == 1
