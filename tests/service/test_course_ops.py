"""Course operations on PostgreSQL: schedule and extensions, the quota's run count, and
`grader similarity` reading the latest submissions from the blob store."""
from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.cli.main import app
from grader.course.deadlines import Extension, LatePolicy, LateStatus
from grader.course.membership import get_or_create_user
from grader.course.policies import grant_extension, late_policy, lateness, quota_decision, set_schedule
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import CourseRole, Enrollment, ErrorClass, Role, RunState, Submission
from grader.service import get_assignment, record_submission
from grader.settings import Settings, get_settings
from grader.storage.blobstore import BlobStore
from tests.service.conftest import own_database
from worker.rubric import load_rubric
from worker.starter_kit import starter_files

DUE = datetime(2026, 3, 20, 3, 59, 59, tzinfo=UTC)


def test_schedule_and_extension_round_trip(sessions: sessionmaker[Session], settings: Settings) -> None:
    policy = LatePolicy(release_at=DUE - timedelta(days=14), due_at=DUE, grace=timedelta(hours=1),
                        late_window=timedelta(days=2), penalty_per_day=0.2)
    with session_scope(sessions) as session:
        set_schedule(session, "hw4", policy, "best")
        student = get_or_create_user(session, "ops-late", Role.student)
        grant_extension(session, "hw4", student, Extension(timedelta(days=1), "flu"))
    with session_scope(sessions) as session:
        row = get_assignment(session, "hw4")
        assert late_policy(row) == policy and row.score_policy == "best"
        student = get_or_create_user(session, "ops-late", Role.student)
        other = get_or_create_user(session, "ops-ontime", Role.student)
        at = DUE + timedelta(hours=3)
        assert lateness(session, row, student.id, at, settings).status is LateStatus.on_time
        result = lateness(session, row, other.id, at, settings)
        assert result.status is LateStatus.late and result.multiplier == pytest.approx(0.8)
        with pytest.raises(ValueError):
            set_schedule(session, "hw4", policy, "average")
        set_schedule(session, "hw4", LatePolicy(), "latest")  # leave no schedule for other tests


def test_quota_counts_own_uploads_but_not_regrades_or_infra_failures(sessions: sessionmaker[Session],
                                                                      settings: Settings) -> None:
    quota = settings.model_copy(update={"quota_runs": 2, "quota_window_s": 3600.0})
    now = datetime.now(UTC)
    blob = BlobStore(settings.blob_dir).put_bytes(b"quota test")
    with session_scope(sessions) as session:
        student = get_or_create_user(session, "ops-quota", Role.student)
        assignment = get_assignment(session, "hw4")
        kinds = [("upload", None, 10), ("regrade", None, 9), ("upload", ErrorClass.infra_error, 8),
                 ("upload", None, 5), ("upload", None, 90)]  # the last is outside the window
        for reason, error, minutes_ago in kinds:
            submission, run = record_submission(session, student, assignment, "s.zip", blob)
            run.reason, run.error_class, run.created_at = reason, error, now - timedelta(minutes=minutes_ago)
            run.state = RunState.failed if error is not None else RunState.built  # final: never sent
        session.flush()
        decision = quota_decision(session, quota, student, assignment, now)
        assert not decision.allowed and decision.used == 2
        assert decision.frees_at is not None
        assert abs((decision.frees_at - (now + timedelta(minutes=50))).total_seconds()) < 1
        teacher = get_or_create_user(session, "ops-teacher", Role.instructor)
        assert quota_decision(session, quota, teacher, assignment, now).allowed


def _kit_zip(edit: str | None = None) -> bytes:
    rubric = load_rubric("hw4")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for rel in starter_files(rubric.starter_dir):
            data = (rubric.starter_dir / rel).read_bytes()
            if edit and rel.as_posix() == "src/softmax_kernel.cu":
                data = data.replace(b"kg::MaxOp()", edit.encode())
            zf.writestr(f"llmsys_hw4/{rel.as_posix()}", data)
    return buf.getvalue()


@pytest.fixture
def own_class(settings_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """The session's settings on a database and data dir of their own: the similarity check drops
    code that many students of the class hold as common knowledge, and on the shared database
    other tests' students uploaded the same kit (so how many depended on which tests ran first)."""
    with own_database(settings_env, tmp_path / "kgdata", "kg_similarity") as env:
        yield env


def test_similarity_command_reads_each_students_latest_zip(own_class: dict[str, str], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_variables(own_class)
    sessions = make_session_factory(make_engine(settings))
    store = BlobStore(settings.blob_dir)
    with session_scope(sessions) as session:
        assignment = get_assignment(session, "hw4")
        for name, data in (("sim-a", _kit_zip()), ("sim-b", _kit_zip()), ("sim-c", b"not a zip"),
                           ("sim-staff", _kit_zip())):
            user = get_or_create_user(session, name, Role.student)
            if name == "sim-staff":  # a student account that is a TA of hw4's course
                session.execute(update(Enrollment).where(Enrollment.user_id == user.id,
                                                         Enrollment.course_id == assignment.course_id)
                                .values(role=CourseRole.ta))
            for upload in (b"an older upload of " + name.encode(), data):  # rows only: nothing to grade
                blob = store.put_bytes(upload)
                session.add(Submission(user=user, assignment=assignment, original_filename="hw4.zip",
                                       size_bytes=blob.size, sha256=blob.sha256))
                session.flush()
    for key, value in own_class.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        out = tmp_path / "report.json"
        result = CliRunner().invoke(app, ["similarity", "hw4", "--out", str(out)])
        html = CliRunner().invoke(app, ["similarity", "hw4", "--out", str(tmp_path / "report.html")])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "left out sim-c" in result.output
    assert "base: " in result.output  # which base the report was computed against
    report = json.loads(out.read_text())
    pair = next(p for p in report["pairs"] if {p["a"], p["b"]} == {"sim-a", "sim-b"})
    assert pair["score"] > 0.95 and pair["matches"]
    # Staff of hw4 upload the kit to try it: not a student's work, never in the comparison.
    assert not any("sim-staff" in (p["a"], p["b"]) for p in report["pairs"]) and "sim-staff" not in result.output
    assert html.exit_code == 0 and "<td>sim-a</td><td>sim-b</td>" in (tmp_path / "report.html").read_text()
    assert "sim-a and sim-b" in (tmp_path / "report-pair-1.html").read_text()  # the first pair's own page
