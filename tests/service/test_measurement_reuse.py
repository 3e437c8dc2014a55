"""Never measure the same thing twice (issue 55): a run whose staged sources, rubric, toolchain
and GPU model equal those of the same student's earlier scored run takes that run's
measurements, names it, and is not built or measured; a changed byte of a kernel, a staff
re-grade, another student and KG_REUSE_MEASUREMENTS=false each measure afresh.

Runs are graded to `scored` on the CPU by the worker's executor in this process, through
vecadd's plug-in (tests/assignments/vecadd: a stage that needs no GPU, real nvcc for the
build), recorded in PostgreSQL. What a run went through is read from the worker's log ("run 7:
stage build") and from its build record: a build of sources built before is a build-cache hit."""
from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ProblemResult, Role, Run, User
from grader.passwords import set_password
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.runs.reuse import SAME_INPUTS, measured_cleanly
from grader.service import get_assignment, record_regrade, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, init_with_course, make_zip
from tests.service.test_web_settings import PASSWORD, Browser

VECADD = Path(__file__).resolve().parents[1] / "assignments" / "vecadd"
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="the executor builds vecadd with nvcc")


@pytest.fixture(scope="module")
def service(settings_env: dict[str, str], settings: Settings) -> Settings:
    """The shared database, with vecadd found through KG_RUBRIC_DIRS and its row in a course."""
    vecadd = Settings.from_variables(settings_env, rubric_dirs=[VECADD.parent], rubrics=["hw4", "vecadd"])
    init_with_course(vecadd, "vecadd")
    return vecadd


@dataclass(frozen=True)
class Student:
    name: str
    token: str


def _student(sessions: sessionmaker[Session]) -> Student:
    name = f"reuse-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, name, Role.student)
        set_password(user, PASSWORD, SUITE_ARGON2)
        return Student(name, issue_token(session, user, "t"))


def _archive(tmp: Path, name: str, edits: dict[str, str]) -> Path:
    (tmp / name).mkdir()
    return make_zip(VECADD / "starter", tmp / name / "vecadd.zip", edits)


def _execute(service: Settings, sessions: sessionmaker[Session], run_id: int) -> None:
    assert RunExecutor(service, sessions, BlobStore(service.blob_dir)).execute(run_id) is Disposition.done


def _upload(service: Settings, sessions: sessionmaker[Session], student: Student, archive: Path) -> int:
    blob = BlobStore(service.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        user = session.scalars(select(User).where(User.username == student.name)).one()
        _, run = record_submission(session, user, get_assignment(session, "vecadd"), archive.name, blob)
        run_id = run.id
    _execute(service, sessions, run_id)
    return run_id


def _stages_gone_through(caplog: pytest.LogCaptureFixture, run_id: int) -> list[str]:
    """The pipeline's stages a run went through, from the worker's log lines ("run 7: stage build")."""
    prefix = f"run {run_id}: stage "
    return [r.getMessage().removeprefix(prefix) for r in caplog.records if r.getMessage().startswith(prefix)]


def _run(client: TestClient, student: Student, run_id: int) -> dict[str, Any]:
    run = client.get(f"/api/v1/runs/{run_id}", headers=auth(student.token)).json()
    assert run["state"] == "scored", run
    return run


@dataclass(frozen=True)
class First:
    """A student's first upload, measured; the source they may upload again."""

    student: Student
    run_id: int
    source: str


def _first_upload(service: Settings, sessions: sessionmaker[Session], tmp: Path) -> First:
    """A new student's upload of sources never built before (the build cache misses), measured."""
    student = _student(sessions)
    source = f"// {uuid.uuid4().hex}\n" + (VECADD / "starter" / "src" / "vecadd.cu").read_text()
    run_id = _upload(service, sessions, student, _archive(tmp, "first", {"src/vecadd.cu": source}))
    return First(student, run_id, source)


@pytest.fixture(scope="module")
def first(service: Settings, sessions: sessionmaker[Session], tmp_path_factory: pytest.TempPathFactory) -> First:
    return _first_upload(service, sessions, tmp_path_factory.mktemp("first"))


@pytest.fixture(scope="module")
def api(service: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(service)) as client:
        yield client


def test_a_repeat_with_only_a_readme_changed_takes_the_measurements_and_names_the_run(
        service: Settings, sessions: sessionmaker[Session], api: TestClient, first: First, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="grader.runs.lifecycle")
    measured = _run(api, first.student, first.run_id)
    assert measured["reused_from"] is None and "reuse" not in measured["stages"]
    archive = _archive(tmp_path, "b", {"src/vecadd.cu": first.source, "README.md": "my notes on vec_add\n"})
    reused = _run(api, first.student, _upload(service, sessions, first.student, archive))
    assert reused["reused_from"] == first.run_id
    assert _stages_gone_through(caplog, reused["id"]) == ["unpack", "stage"]  # neither built nor measured
    note = f"Measured in run {first.run_id}: {SAME_INPUTS}"
    assert reused["message"].startswith(measured["message"]) and note in reused["message"]
    assert note in reused["report"]["output"] and reused["stages"]["reuse"]["status"] == "ok"
    assert reused["score"] == measured["score"] == 10
    # the very measurements, case by case
    assert [r["details"] for r in reused["results"]] == [r["details"] for r in measured["results"]]
    # the build's record is run N's, which missed the build cache: a build now would hit it
    assert reused["stages"]["build"] == measured["stages"]["build"]
    assert reused["toolchain"] == measured["toolchain"] and measured["toolchain"]["build_cached"] == {"vecadd": False}
    assert "README.md" in reused["stages"]["stage"]["log"]  # this run's own staging, which ignored it
    with session_scope(sessions) as session:
        keys = {r.id: r.measure_key for r in session.scalars(select(Run).where(Run.id.in_([first.run_id, reused["id"]])))}
    assert keys[first.run_id] is not None and keys[first.run_id] == keys[reused["id"]]
    page = Browser(service, first.student.name).client.get(f"/runs/{reused['id']}").text
    assert f'<a href="/runs/{first.run_id}">run {first.run_id}</a>' in page and note in page


def test_one_changed_byte_of_a_kernel_is_measured_afresh(
        service: Settings, sessions: sessionmaker[Session], api: TestClient, first: First, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="grader.runs.lifecycle")
    changed = first.source.replace("a[i] + b[i];", "a[i] + b[i] ;")
    assert changed != first.source and len(changed) == len(first.source) + 1
    fresh = _run(api, first.student, _upload(service, sessions, first.student,
                                                _archive(tmp_path, "c", {"src/vecadd.cu": changed})))
    assert fresh["reused_from"] is None and "reuse" not in fresh["stages"] and fresh["score"] == 10
    assert "Measured in run" not in fresh["message"]
    assert _stages_gone_through(caplog, fresh["id"]) == ["unpack", "stage", "build", "run"]
    assert _key(sessions, fresh["id"]) not in (None, _key(sessions, first.run_id))


def test_a_regrade_another_student_and_the_setting_off_measure_afresh(
        service: Settings, sessions: sessionmaker[Session], api: TestClient, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="grader.runs.lifecycle")
    first = _first_upload(service, sessions, tmp_path)  # its own: these runs are measured with its key
    with session_scope(sessions) as session:
        submission = session.get(Run, first.run_id).submission  # type: ignore[union-attr]
        regrade = record_regrade(session, submission).id
    _execute(service, sessions, regrade)
    other = _student(sessions)
    theirs = _upload(service, sessions, other, _archive(tmp_path, "d", {"src/vecadd.cu": first.source}))
    off = service.model_copy(update={"reuse_measurements": False})
    again = _upload(off, sessions, first.student, _archive(tmp_path, "e", {"src/vecadd.cu": first.source}))
    for student, run_id in ((first.student, regrade), (other, theirs), (first.student, again)):
        run = _run(api, student, run_id)
        assert run["reused_from"] is None and "reuse" not in run["stages"], run
        # the same inputs all along: the key is recorded, and the run is built (from the build
        # cache, which the first run filled) and measured
        assert _key(sessions, run_id) == _key(sessions, first.run_id)
        assert _stages_gone_through(caplog, run_id) == ["unpack", "stage", "build", "run"]
        assert run["toolchain"]["build_cached"] == {"vecadd": True}


def _key(sessions: sessionmaker[Session], run_id: int) -> str | None:
    with session_scope(sessions) as session:
        return session.get(Run, run_id).measure_key  # type: ignore[union-attr]


def _with_measurements(*statuses: str | None) -> Run:
    return Run(results=[
        ProblemResult(problem_id=str(i), title="p", status="passed", points=1.0, max_points=1.0,
                      details={"measurement": None if s is None else {"status": s}}) for i, s in enumerate(statuses)])


def test_only_a_run_whose_measurements_all_ended_ok_is_reused() -> None:
    """A timeout, a crash, an error or a problem left for the GPU budget may be the machine's
    moment: the student's next upload measures afresh. A problem without a measurement (its
    kernel did not build) is as repeatable as the build."""
    assert measured_cleanly(_with_measurements("ok", "ok", None))
    for status in ("timeout", "crashed", "error", "not_run"):
        assert not measured_cleanly(_with_measurements("ok", status))
    assert not measured_cleanly(_with_measurements())
