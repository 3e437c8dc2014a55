"""A schedule change shows the grades it would change before it is saved (issue 51), on real
PostgreSQL: students late by different amounts, the late window shortened from 3 days to 1;
the settings page's save lands on a preview listing exactly the grades that change (and saves
nothing), the confirmation saves it with an audit event, the saved notice's undo is previewed
the same way and gives the grades back; `grader schedule` lists the same changes and saves
only with --yes."""
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.cli.main import app, init_database
from grader.course.adjustments import add_entry
from grader.course.assignment_settings import ScheduleChange
from grader.course.deadlines import Extension, LatePolicy
from grader.course.membership import get_or_create_user
from grader.course.policies import grant_extension, late_policy, set_schedule
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Assignment, AuditEvent, Role, Run, RunState, Submission, User, utcnow
from grader.models import Course as CourseRow
from grader.passwords import set_password
from grader.reads.gradebook_reads import gradebook
from grader.schedule_changes import preview_schedule
from grader.service import get_assignment
from grader.settings import Settings, get_settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_confirmations import confirm_form
from tests.service.test_web_settings import PASSWORD, Browser

DUE_AGO = timedelta(days=10)
# name -> (upload time after the due time, raw score of 10): 10% per started day, no grace
LATE = {"early": -timedelta(days=1), "halfday": timedelta(hours=12), "onefour": timedelta(days=1, hours=4),
        "twohalf": timedelta(days=2, hours=12), "extended": timedelta(days=1, hours=4),
        "manual": timedelta(days=2, hours=12)}
GRADES_3D = {"early": 10.0, "halfday": 9.0, "onefour": 8.0, "twohalf": 7.0, "extended": 9.0, "manual": 6.0,
             "norun": None}
# A window of one day: only those more than a day late (without an extension or a manual grade) lose it all
GRADES_1D = GRADES_3D | {"onefour": 0.0, "twohalf": 0.0}


@dataclass
class Klass:
    slug: str
    prof: str
    tag: str

    def login(self, name: str) -> str:
        return f"{name}-{self.tag}"


@pytest.fixture
def klass(sessions: sessionmaker[Session]) -> Iterator[Klass]:
    tag = uuid.uuid4().hex[:6]
    slug = f"sched-{tag}"
    with session_scope(sessions) as session:
        assignment = Assignment(slug=slug, title="Schedule preview", course=CourseRow(slug=slug, title=slug),
                                total_points=10)
        session.add(assignment)
        session.flush()  # first: new accounts join every course there is
        prof = get_or_create_user(session, f"sched-prof-{tag}", Role.instructor)
        set_password(prof, PASSWORD, SUITE_ARGON2)
        due = utcnow().replace(microsecond=0) - DUE_AGO  # to the second, as the settings form shows it
        for name in [*LATE, "norun"]:
            student = get_or_create_user(session, f"{name}-{tag}", Role.student)
            if name in LATE:
                submission = Submission(user=student, assignment=assignment, original_filename="hw.zip",
                                        size_bytes=10, sha256=uuid.uuid4().hex * 2, uploaded_at=due + LATE[name])
                session.add(Run(submission=submission, reason="upload", state=RunState.scored, score=10.0,
                                finished_at=utcnow()))
        set_schedule(session, slug, LatePolicy(due_at=due, late_window=timedelta(days=3), penalty_per_day=0.1),
                     "latest")
        extended = session.scalars(select(User).where(User.username == f"extended-{tag}")).one()
        grant_extension(session, slug, extended, Extension(timedelta(days=1), "ill"))
        session.flush()
        manual = session.scalars(select(User).where(User.username == f"manual-{tag}")).one()
        add_entry(session, assignment, manual, prof, "manual", "6", "graded by hand")
    yield Klass(slug, prof.username, tag)


def grades(sessions: sessionmaker[Session], klass: Klass) -> dict[str, float | None]:
    with session_scope(sessions) as session:
        book = gradebook(session, get_assignment(session, klass.slug))
    return {row.username.rsplit("-", 1)[0]: row.total for row in book.rows if row.username.endswith(f"-{klass.tag}")}


def window(sessions: sessionmaker[Session], klass: Klass) -> timedelta:
    with session_scope(sessions) as session:
        return late_policy(get_assignment(session, klass.slug)).late_window


def schedule_events(sessions: sessionmaker[Session], klass: Klass) -> list[AuditEvent]:
    with session_scope(sessions) as session:
        rows = list(session.scalars(select(AuditEvent).where(AuditEvent.event == "schedule_changed",
                                                             AuditEvent.detail.contains(f'"{klass.slug}"'))
                                    .order_by(AuditEvent.id)))
        session.expunge_all()
        return rows


def settings_form(prof: Browser, klass: Klass, **changed: str) -> dict[str, str]:
    """The settings page's schedule form as it stands, with `changed` typed over it."""
    html = prof.client.get(f"/assignments/{klass.slug}/settings").text
    form = dict(re.findall(r'<input id="s-[a-z_]+" name="([a-z_]+)" type="[a-z-]+"(?: step="1")? value="([^"]*)"',
                           html))
    form["score_policy"] = "latest"
    return form | {"csrf_token": Browser.csrf(html)} | changed


def preview_rows(html: str) -> dict[str, tuple[str, str, str]]:
    """The preview's table: login -> (before, after, why)."""
    body = html.split('id="grade-changes"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>((?:<td[^>]*>.*?</td>)+)</tr>", body)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    return {c[0]: (c[2], c[3], c[4]) for c in cells}


def test_a_shorter_late_window_is_previewed_confirmed_audited_and_undone(
        klass: Klass, settings: Settings, sessions: sessionmaker[Session]) -> None:
    prof = Browser(settings, klass.prof)
    here = f"/assignments/{klass.slug}/settings"
    assert grades(sessions, klass) == GRADES_3D
    asked = prof.client.post(here, data=settings_form(prof, klass, late_window="1d"), follow_redirects=False)
    assert asked.status_code == 200 and 'id="confirm-form"' in asked.text, asked.text
    shown = preview_rows(asked.text)
    assert shown == {klass.login("onefour"): ("8", "0", "late by 1 d 4 h: now past the late window"),
                     klass.login("twohalf"): ("7", "0", "late by 2 d 12 h: now past the late window")}
    assert "Late window: 3d → 1d." in asked.text and "It changes 2 students&#39; grades." in asked.text
    # Nothing is saved before the confirmation.
    assert window(sessions, klass) == timedelta(days=3) and grades(sessions, klass) == GRADES_3D
    assert schedule_events(sessions, klass) == []

    action, fields = confirm_form(asked.text)
    done = prof.client.post(action, data=fields, follow_redirects=False)
    assert done.status_code == 303, done.text
    assert window(sessions, klass) == timedelta(days=1) and grades(sessions, klass) == GRADES_1D
    [event] = schedule_events(sessions, klass)
    with session_scope(sessions) as session:
        assert session.get(User, event.user_id).username == klass.prof  # type: ignore[union-attr]
    assert event.via == "web"
    assert json.loads(event.detail) == {"assignment": klass.slug, "changed": {"late_window": ["3d", "1d"]},
                                        "grades": 2}

    saved = prof.client.get(done.headers["location"]).text
    assert "Late window: 3d → 1d (2 grade(s) changed)." in saved
    undo_token = re.search(r'action="/assignments/[^"]+/settings/undo" id="undo-form">\s*'
                           r'<input type="hidden" name="csrf_token" value="([^"]+)">\s*'
                           r'<input type="hidden" name="change" value="(\d+)">', saved)
    assert undo_token and int(undo_token.group(2)) == event.id
    undo = prof.client.post(f"{here}/undo", data={"csrf_token": undo_token.group(1), "change": undo_token.group(2)},
                            follow_redirects=False)
    assert undo.status_code == 200 and preview_rows(undo.text) == {
        klass.login("onefour"): ("0", "8", "late by 1 d 4 h: now 2 started day(s) after the grace x 10% = 20% off"),
        klass.login("twohalf"): ("0", "7", "late by 2 d 12 h: now 3 started day(s) after the grace x 10% = 30% off")}
    assert window(sessions, klass) == timedelta(days=1)  # the undo too waits for its confirmation
    action, fields = confirm_form(undo.text)
    assert prof.client.post(action, data=fields, follow_redirects=False).status_code == 303
    assert window(sessions, klass) == timedelta(days=3) and grades(sessions, klass) == GRADES_3D
    assert [json.loads(e.detail)["changed"] for e in schedule_events(sessions, klass)] == [
        {"late_window": ["3d", "1d"]}, {"late_window": ["1d", "3d"]}]


def test_a_change_that_alters_no_grade_is_saved_at_once_saying_so(
        klass: Klass, settings: Settings, sessions: sessionmaker[Session]) -> None:
    prof = Browser(settings, klass.prof)
    done = prof.client.post(f"/assignments/{klass.slug}/settings", data=settings_form(prof, klass, late_window="4d"),
                            follow_redirects=False)
    assert done.status_code == 303 and window(sessions, klass) == timedelta(days=4)
    assert "Late window: 3d → 4d (no grade changed)." in prof.client.get(done.headers["location"]).text


def test_a_confirmation_whose_grades_moved_meanwhile_is_previewed_again(
        klass: Klass, settings: Settings, sessions: sessionmaker[Session]) -> None:
    prof = Browser(settings, klass.prof)
    asked = prof.client.post(f"/assignments/{klass.slug}/settings", data=settings_form(prof, klass, late_window="1d"))
    action, fields = confirm_form(asked.text)
    with session_scope(sessions) as session:  # another late upload of "halfday" is scored meanwhile
        student = session.scalars(select(User).where(User.username == klass.login("halfday"))).one()
        late = Submission(user=student, assignment=get_assignment(session, klass.slug), original_filename="b.zip",
                          size_bytes=10, sha256=uuid.uuid4().hex * 2, uploaded_at=utcnow() - DUE_AGO + timedelta(days=2))
        session.add(Run(submission=late, reason="upload", state=RunState.scored, score=10.0, finished_at=utcnow()))
    again = prof.client.post(action, data=fields, follow_redirects=False)
    assert again.status_code == 200 and "check them again" in again.text
    assert klass.login("halfday") in preview_rows(again.text)
    assert window(sessions, klass) == timedelta(days=3)


def test_the_command_line_lists_the_changes_and_saves_only_with_yes(
        klass: Klass, sessions: sessionmaker[Session], settings_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        refused = CliRunner().invoke(app, ["schedule", klass.slug, "--late-window", "1d"])
        assert refused.exit_code == 1, refused.output
        assert "change: Late window: 3d -> 1d" in refused.output
        assert f"{klass.login('onefour')}: 8 -> 0 (late by 1 d 4 h: now past the late window)" in refused.output
        assert f"{klass.login('twohalf')}: 7 -> 0 (late by 2 d 12 h: now past the late window)" in refused.output
        assert "halfday" not in refused.output and "nothing saved" in refused.output
        assert window(sessions, klass) == timedelta(days=3) and grades(sessions, klass) == GRADES_3D
        done = CliRunner().invoke(app, ["schedule", klass.slug, "--late-window", "1d", "--yes"])
        assert done.exit_code == 0, done.output
    finally:
        get_settings.cache_clear()
    assert window(sessions, klass) == timedelta(days=1) and grades(sessions, klass) == GRADES_1D
    [event] = schedule_events(sessions, klass)
    assert event.via == "cli" and json.loads(event.detail)["changed"] == {"late_window": ["3d", "1d"]}


def test_the_preview_saves_nothing_on_sqlite_either(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The embedded database: the preview's savepoint, opened after reads (when pysqlite has
    begun no transaction yet), is rolled back, and what the session wrote before it stays."""
    data = tmp_path_factory.mktemp("sqlite-preview")
    own = Settings(_env_file=None, data_dir=data, database_url=f"sqlite:///{data}/db.sqlite")  # type: ignore[call-arg]
    init_database(own)
    sessions = make_session_factory(make_engine(own))
    with session_scope(sessions) as session:
        assignment = Assignment(slug="lite", title="Lite", course=CourseRow(slug="lite", title="Lite"), total_points=10)
        session.add(assignment)
        session.flush()
        student = get_or_create_user(session, "lite-stu", Role.student)
        due = utcnow().replace(microsecond=0) - DUE_AGO
        session.add(Run(submission=Submission(user=student, assignment=assignment, original_filename="a.zip",
                                              size_bytes=1, sha256="c" * 64, uploaded_at=due + timedelta(days=2)),
                        reason="upload", state=RunState.scored, score=10.0, finished_at=utcnow()))
        set_schedule(session, "lite", LatePolicy(due_at=due, late_window=timedelta(days=3), penalty_per_day=0.1),
                     "latest")
    with session_scope(sessions) as session:
        session.scalars(select(User)).all()  # a read first: no transaction begun yet
        get_assignment(session, "lite").title = "Lite, renamed"  # a write of the session's own, kept
        shown = preview_schedule(session, "lite", ScheduleChange(late_window="1d"), own)
        assert [(c.login, c.before, c.after) for c in shown.changes] == [("lite-stu", 8.0, 0.0)]
        assert late_policy(get_assignment(session, "lite")).late_window == timedelta(days=3)
    with session_scope(sessions) as session:
        row = get_assignment(session, "lite")
        assert (row.title, late_policy(row).late_window) == ("Lite, renamed", timedelta(days=3))
