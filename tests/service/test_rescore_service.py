"""Scoring an assignment's stored measurements again under its changed rubric (issue 53), on real
PostgreSQL: runs stored under a copy of hw4's rubric, then its Problem 1.1 target lowered from
6.5x to 4x. The preview lists each student whose counted run or grade changes and the run that
cannot be scored again (no stored measurement), and writes nothing; applying writes the new
scores in one transaction, an audit event per run with the points before and after, the earlier
points kept beside the new ones; the settings page's button does the same for instructors only;
`grader rescore` lists the same and writes only with --apply."""
from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.auth.audit import Via
from grader.cli.main import app, init_database
from grader.course.adjustments import add_entry
from grader.course.membership import enroll, get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import (
    Assignment,
    AuditEvent,
    CourseRole,
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
from grader.reads.gradebook_reads import gradebook
from grader.rescoring import BEFORE_KEY, apply_rescore, preview_rescore
from grader.service import get_assignment
from grader.settings import Settings, get_settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.rescore_data import rubric_copy, set_target, stored_results
from tests.service.test_web_confirmations import confirm_form
from tests.service.test_web_settings import PASSWORD, Browser

# Each student's runs: the 1.1 speedup each measured (None: a run stored without measurements)
RUNS: dict[str, list[float | None]] = {"up": [4.0], "twice": [3.0, 5.0], "same": [7.0], "old": [None], "manual": [4.0]}
BEFORE = {"up": 95.62, "twice": 96.34, "same": 97.18, "old": 95.62, "manual": 6.0}  # grades (manual: by hand)
AFTER = BEFORE | {"up": 97.18, "twice": 97.18}


@dataclass
class Klass:
    slug: str
    prof: str
    ta: str
    tag: str
    folder: Path
    settings: Settings

    def login(self, name: str) -> str:
        return f"{name}-{self.tag}"

    def change_rubric(self) -> None:
        """Problem 1.1's target from 6.5x to 4x (the file rewritten, its mtime moved on)."""
        rubric_copy(self.folder, self.slug, set_target("1.1", 4.0))
        path = self.folder / f"{self.slug}.yaml"
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


def seed(session: Session, slug: str, folder: Path, tag: str, runs: dict[str, list[float | None]]) -> tuple[str, str]:
    """The assignment `slug` (rubric: hw4's copy in `folder`) in a course of its own, an
    instructor and a TA (password PASSWORD), and a student per entry of `runs` with a scored run
    per speedup (None: its problem results hold no measurement); (instructor, TA)."""
    rubric = rubric_copy(folder, slug)
    course = CourseRow(slug=slug, title=slug)
    assignment = Assignment(slug=slug, title=f"Rescore {tag}", course=course, total_points=rubric.total_points)
    session.add(assignment)
    session.flush()
    prof = get_or_create_user(session, f"rs-prof-{tag}", Role.instructor, [course])
    ta = get_or_create_user(session, f"rs-ta-{tag}", Role.student, [])
    enroll(session, ta, course, CourseRole.ta)
    for user in (prof, ta):
        set_password(user, PASSWORD, SUITE_ARGON2)
    for name, figures in runs.items():
        student = get_or_create_user(session, f"{name}-{tag}", Role.student, [course])
        for figure in figures:
            results = stored_results(rubric, {"1.1": figure or 4.0, "1.2": 6.0, "2.1": 20.0, "2.2": 2.0, "3": 1.3})
            score = round(sum(r["points"] for r in results), 2)
            submission = Submission(user=student, assignment=assignment, original_filename="hw.zip", size_bytes=10,
                                    sha256=uuid.uuid4().hex * 2, uploaded_at=utcnow())
            run = Run(submission=submission, reason="upload", state=RunState.scored, score=score,
                      finished_at=utcnow(), message=f"Scored {score:g} / 100.")
            run.results = [ProblemResult(**(r | {"details": None} if figure is None else r)) for r in results]
            session.add(run)
            session.flush()
    return prof.username, ta.username


@pytest.fixture
def klass(sessions: sessionmaker[Session], settings_env: dict[str, str], tmp_path: Path) -> Iterator[Klass]:
    tag = uuid.uuid4().hex[:6]
    slug, folder = f"rescore-{tag}", tmp_path / "rubrics"
    with session_scope(sessions) as session:
        prof, ta = seed(session, slug, folder, tag, RUNS)
        assignment = get_assignment(session, slug)
        manual = session.scalars(select(User).where(User.username == f"manual-{tag}")).one()
        add_entry(session, assignment, manual, session.scalars(select(User).where(User.username == prof)).one(),
                  "manual", "6", "graded by hand")
    yield Klass(slug, prof, ta, tag, folder, Settings.from_variables(settings_env, rubric_dirs=[folder]))


def grades(sessions: sessionmaker[Session], klass: Klass) -> dict[str, float | None]:
    with session_scope(sessions) as session:
        book = gradebook(session, get_assignment(session, klass.slug))
    return {row.username.rsplit("-", 1)[0]: row.total for row in book.rows if row.username.endswith(f"-{klass.tag}")}


def run_scores(sessions: sessionmaker[Session], klass: Klass) -> dict[int, float | None]:
    with session_scope(sessions) as session:
        return dict(session.execute(select(Run.id, Run.score).join(Submission).join(Assignment)  # type: ignore[arg-type]
                                    .where(Assignment.slug == klass.slug)).all())


def rescored_events(sessions: sessionmaker[Session], klass: Klass) -> list[dict[str, Any]]:
    with session_scope(sessions) as session:
        rows = session.scalars(select(AuditEvent).where(AuditEvent.event == "rescored",
                                                        AuditEvent.detail.contains(f'"{klass.slug}"'))
                               .order_by(AuditEvent.id)).all()
        return [json.loads(e.detail) | {"via": e.via, "login": e.login} for e in rows]


def test_the_preview_lists_each_change_and_writes_nothing_then_apply_writes_it_audited(
        klass: Klass, sessions: sessionmaker[Session]) -> None:
    assert grades(sessions, klass) == BEFORE
    with session_scope(sessions) as session:  # the rubric as it was graded: nothing to change
        same = preview_rescore(session, klass.slug, klass.settings)
        assert (same.changes, same.students[0].login, same.unchanged) == ([], klass.login("old"), 5)
    klass.change_rubric()
    scores = run_scores(sessions, klass)
    with session_scope(sessions) as session:
        shown = preview_rescore(session, klass.slug, klass.settings, course=klass.slug)
        lines = {line.login.rsplit("-", 1)[0]: line for line in shown.students}
    assert set(lines) == {"up", "twice", "manual", "old"}
    assert (lines["up"].run_before, lines["up"].run_after, lines["up"].grade_before, lines["up"].grade_after) == (
        95.62, 97.18, 95.62, 97.18)
    assert lines["up"].problems == "1.1: 18.44 → 20"
    assert lines["twice"].problems == "1.1: 19.16 → 20"  # the counted (newer) run; the older changes too
    assert lines["manual"].grade_before == lines["manual"].grade_after == 6.0
    assert lines["manual"].why.startswith("a manual grade decides the grade")
    assert lines["old"].why == "not re-scorable, its score stays: problem 1.1: no measurement is stored (graded " \
                               "before they were kept)"
    assert (len(shown.changes), shown.other_runs, shown.unchanged, len(shown.refused)) == (4, 1, 1, 1)
    # Nothing written by the preview.
    assert run_scores(sessions, klass) == scores and grades(sessions, klass) == BEFORE

    with session_scope(sessions) as session:
        events = apply_rescore(session, preview_rescore(session, klass.slug, klass.settings), klass.settings,
                               Via.cli, None)
        assert len(events) == 4
    assert grades(sessions, klass) == AFTER
    after = run_scores(sessions, klass)
    assert sorted(v or 0.0 for k, v in after.items() if scores[k] != v) == [95.93, 97.18, 97.18, 97.18]  # the older run: 3x of 4x
    logged = rescored_events(sessions, klass)
    assert {e["login"] for e in logged} == {klass.login(n) for n in ("up", "twice", "manual")}
    up = next(e for e in logged if e["login"] == klass.login("up"))
    assert (up["score"], up["problems"], up["via"]) == ([95.62, 97.18], {"1.1": [18.44, 20.0]}, "cli")
    with session_scope(sessions) as session:
        row = session.scalars(select(ProblemResult).where(ProblemResult.run_id == up["run"],
                                                          ProblemResult.problem_id == "1.1")).one()
        assert (row.points, (row.details or {})[BEFORE_KEY]["points"], row.message) == (20.0, 18.44, "full marks")
        assert session.get(Run, up["run"]).message == "Scored 97.18 / 100."  # type: ignore[union-attr]
        assert preview_rescore(session, klass.slug, klass.settings).changes == []  # applied: nothing left


def preview_rows(html: str, table: str) -> dict[str, list[str]]:
    body = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]
    return {cells[0]: cells for cells in rows if cells}


def test_the_settings_button_previews_and_confirms_for_instructors_only(
        klass: Klass, sessions: sessionmaker[Session]) -> None:
    klass.change_rubric()
    ta = Browser(klass.settings, klass.ta)
    assert ta.client.get(f"/assignments/{klass.slug}/rescore").status_code == 403
    prof = Browser(klass.settings, klass.prof)
    assert f'href="/assignments/{klass.slug}/rescore"' in prof.client.get(f"/assignments/{klass.slug}/settings").text
    asked = prof.client.get(f"/assignments/{klass.slug}/rescore")
    assert asked.status_code == 200 and "It changes 4 runs&#39; scores." in asked.text, asked.text
    students = preview_rows(asked.text, "rescore-students")
    assert students[klass.login("up")][2].startswith("run ")
    assert students[klass.login("up")][3:6] == ["95.62 → 97.18", "1.1: 18.44 → 20", "95.62 → 97.18"]
    assert preview_rows(asked.text, "rescore-refused")[f"run {students[klass.login('old')][2][4:]}"][1] == \
        klass.login("old")
    assert grades(sessions, klass) == BEFORE
    action, fields = confirm_form(asked.text)
    stolen = {"confirm": fields["confirm"], "csrf_token": Browser.csrf(ta.client.get("/").text)}
    assert ta.client.post(action, data=stolen, follow_redirects=False).status_code == 403
    assert prof.client.post(action, data={"confirm": fields["confirm"]}, follow_redirects=False).status_code == 403
    assert grades(sessions, klass) == BEFORE  # neither a TA nor a form without its CSRF token wrote anything
    done = prof.client.post(action, data=fields, follow_redirects=False)
    assert done.status_code == 303, done.text
    assert grades(sessions, klass) == AFTER
    assert "Scores written: 4 run(s) scored again." in prof.client.get(done.headers["location"]).text
    assert {e["via"] for e in rescored_events(sessions, klass)} == {"web"}
    again = prof.client.post(action, data=fields, follow_redirects=False)  # sent twice: nothing left to write
    assert again.status_code == 200 and "Nothing changes" in again.text
    assert len(rescored_events(sessions, klass)) == 4


def test_the_command_line_lists_the_changes_and_writes_only_with_apply(
        klass: Klass, sessions: sessionmaker[Session], settings_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {**settings_env, "KG_RUBRIC_DIRS": json.dumps([str(klass.folder)])}.items():
        monkeypatch.setenv(key, value)
    klass.change_rubric()
    get_settings.cache_clear()
    try:
        listed = CliRunner().invoke(app, ["rescore", klass.slug])
        assert listed.exit_code == 0, listed.output
        assert f"{klass.slug}: scored again under its current rubric (out of 100): 4 run(s) change, 1 stay the " \
               "same, 1 not re-scorable" in listed.output
        assert re.search(rf"  {klass.login('up')}: run \d+ 95.62 -> 97.18, grade 95.62 -> 97.18; 1.1: 18.44 -> 20 ",
                         listed.output), listed.output
        assert "no measurement is stored" in listed.output and "nothing written" in listed.output
        assert grades(sessions, klass) == BEFORE and rescored_events(sessions, klass) == []
        wrong = CliRunner().invoke(app, ["rescore", klass.slug, "--course", "another", "--apply"])
        assert wrong.exit_code == 2 and "is not an assignment of course another" in wrong.output
        done = CliRunner().invoke(app, ["rescore", klass.slug, "--course", klass.slug, "--apply"])
        assert done.exit_code == 0, done.output
        assert "written: 4 run(s) scored again" in done.output
    finally:
        get_settings.cache_clear()
    assert grades(sessions, klass) == AFTER
    assert {e["via"] for e in rescored_events(sessions, klass)} == {"cli"}


def test_a_run_that_reused_measurements_is_scored_like_its_source_on_sqlite_too(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The embedded database: a run that took an earlier run's measurements (grader.runs.reuse)
    holds their copy and is scored again the same; the preview's savepoint writes nothing there
    either, and apply writes both."""
    data = tmp_path_factory.mktemp("sqlite-rescore")
    folder = data / "rubrics"
    own = Settings(_env_file=None, data_dir=data, database_url=f"sqlite:///{data}/db.sqlite",  # type: ignore[call-arg]
                   rubric_dirs=[folder])
    init_database(own)
    sessions = make_session_factory(make_engine(own))
    with session_scope(sessions) as session:
        seed(session, "lite-rescore", folder, "lite", {"re": [4.0]})
        first = session.scalars(select(Run).join(Submission).join(Assignment)
                                .where(Assignment.slug == "lite-rescore")).one()
        copy = Run(submission=first.submission, reason="upload", state=RunState.scored, score=first.score,
                   finished_at=utcnow(), message=first.message, reused_from=first.id,
                   results=[ProblemResult(problem_id=r.problem_id, title=r.title, status=r.status, points=r.points,
                                          max_points=r.max_points, message=r.message, details=r.details)
                            for r in first.results])
        session.add(copy)
    rubric_copy(folder, "lite-rescore", set_target("1.1", 4.0))
    with session_scope(sessions) as session:
        shown = preview_rescore(session, "lite-rescore", own)
        assert [(c.rescored.before, c.rescored.total) for c in shown.changes] == [(95.62, 97.18), (95.62, 97.18)]
        assert [line.run_id for line in shown.students] == [copy.id]  # the newer run counts
    with session_scope(sessions) as session:
        assert sorted(s or 0.0 for s in session.scalars(select(Run.score))) == [95.62, 95.62]
        apply_rescore(session, preview_rescore(session, "lite-rescore", own), own, Via.cli, None)
    with session_scope(sessions) as session:
        assert sorted(s or 0.0 for s in session.scalars(select(Run.score))) == [97.18, 97.18]
