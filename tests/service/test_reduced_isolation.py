"""Reduced isolation is never silent (issue 54): a worker whose sandbox lacks something, where
reduced isolation was asked for (KG_SANDBOX_REQUIRE_NAMESPACES=false), records what it lacks on
every run it records; staff see it on the run page and the grading controls page, students do
not. And a real worker whose sandbox cannot be proven refuses to take jobs, saying why."""
from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.course.membership import enroll, get_or_create_user
from grader.db import session_scope
from grader.models import REDUCED_ISOLATION, CourseRole, Role, Run, RunState, User
from grader.passwords import set_password
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.runs.worker_start import EXIT_BROKEN_SANDBOX
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import WorkerProcess, make_zip, new_student, run_row, submit
from tests.service.test_web_settings import PASSWORD, Browser
from tests.service.test_worker_toolchain import own_queue, own_sessions  # noqa: F401

LACKS = ("no ipc namespace of its own", "no syscall filter (seccomp)")


@dataclass(frozen=True)
class People:
    student: str
    prof: str


@pytest.fixture(scope="module")
def people(sessions: sessionmaker[Session]) -> People:
    """A student and an instructor of hw4's course (hw4: a run's outcome names its rubric)."""
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        course = get_assignment(session, "hw4").course
        assert course is not None
        names = People(f"iso-stu-{tag}", f"iso-prof-{tag}")
        for name, role in ((names.student, CourseRole.student), (names.prof, CourseRole.instructor)):
            user = get_or_create_user(session, name, Role.student, courses=[])
            enroll(session, user, course, role)
            set_password(user, PASSWORD, SUITE_ARGON2)
    return names


def _graded_run(settings: Settings, sessions: sessionmaker[Session], login: str, reduced: tuple[str, ...]) -> int:
    """A run of hw4 by `login`, recorded by an executor with `reduced` isolation (its blob is
    never read: with no attempts left, it ends as an infrastructure failure)."""
    with session_scope(sessions) as session:
        user = session.scalars(select(User).where(User.username == login)).one()
        blob = BlobStore(settings.blob_dir).put_bytes(b"never read")
        _, run = record_submission(session, user, get_assignment(session, "hw4"), "x.zip", blob)
        run_id = run.id
    last = settings.model_copy(update={"max_attempts": 0})
    executor = RunExecutor(last, sessions, BlobStore(last.blob_dir), reduced_isolation=reduced)
    assert executor.execute(run_id) is Disposition.done
    return run_id


def test_a_run_graded_with_reduced_isolation_says_so_to_staff(
        settings: Settings, sessions: sessionmaker[Session], people: People) -> None:
    reduced = _graded_run(settings, sessions, people.student, LACKS)
    full = _graded_run(settings, sessions, people.student, ())
    with session_scope(sessions) as session:
        toolchains = {run_id: session.get(Run, run_id).toolchain or {} for run_id in (reduced, full)}  # type: ignore[union-attr]
    assert toolchains[reduced][REDUCED_ISOLATION] == list(LACKS) and REDUCED_ISOLATION not in toolchains[full]
    prof, student = Browser(settings, people.prof), Browser(settings, people.student)
    shown = prof.client.get(f"/runs/{reduced}").text
    assert "Reduced isolation: no ipc namespace of its own; no syscall filter (seccomp)" in shown
    assert "Reduced isolation" not in prof.client.get(f"/runs/{full}").text
    assert "Reduced isolation" not in student.client.get(f"/runs/{reduced}").text
    controls = prof.client.get("/assignments/hw4/grading").text
    assert (f"Reduced isolation: runs of the\n      last hour graded on {socket.gethostname()}, whose sandbox lacks "
            "no ipc namespace of its own; no syscall filter (seccomp)") in controls


@pytest.mark.timeout(300)
def test_a_worker_whose_sandbox_fails_its_canary_refuses_jobs(
        own_queue: dict[str, str], own_sessions: sessionmaker[Session], kit_tree: Path, tmp_path: Path) -> None:  # noqa: F811
    """A sandbox user that does not exist: the toolchain check passes, the canary cannot start,
    the worker exits before consuming, and the queued run waits untouched."""
    env = {**own_queue, "KG_SANDBOX_USER": "kg-no-such-user"}
    learner = new_student(own_sessions, "canary-wait")
    with TestClient(create_app(Settings.from_variables(env))) as client:
        run_id = submit(client, learner, make_zip(kit_tree, tmp_path / "kit.zip"))["run_id"]
    worker = WorkerProcess(env, tmp_path / "worker.log")
    worker.start()
    try:
        assert worker.proc is not None and worker.proc.wait(timeout=240) == EXIT_BROKEN_SANDBOX, worker.log()
    finally:
        worker.stop()
    (line,) = [line for line in worker.log_path.read_text().splitlines() if "refuses to take jobs" in line]
    assert line.endswith("this worker refuses to take jobs: its sandbox falls short: sandbox user 'kg-no-such-user' "
                         "does not exist (KG_SANDBOX_REQUIRE_NAMESPACES=false takes jobs with this reduced isolation, "
                         "shown on every run)"), line
    waiting = run_row(own_sessions, run_id)
    assert (waiting.state, waiting.attempts) == (RunState.queued, 0), "the refusing worker touched the run"
