"""Run notices by e-mail, received by a real SMTP server (aiosmtpd on a free port): a run that
a real Celery worker fails tells the student why it was not graded, a run the executor scores
(CPU stand-in) gives the late-penalized grade per problem; each with the run page's link. A
student without an address gets nothing, and a mail server that is down costs only the notice."""
from __future__ import annotations

import shutil
import socket
import time
import uuid
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope
from aiosmtpd.smtp import Session as SMTPSession
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Run, User, utcnow
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.service import get_assignment, record_submission
from grader.settings import Settings, SmtpSettings
from grader.storage.blobstore import BlobStore
from tests.fixtures import cpu_standin
from tests.service.conftest import WorkerProcess, wait_for_run
from tests.service.test_grading import _symlink_entry, _zip_bytes, submit_bytes
from tests.service.test_scored_run import small_stage, work  # noqa: F401 (fixtures)

SENDER = "grader@course.example.edu"
PUBLIC_URL = "https://grader.course.example.edu"


class Mailbox:
    """What the SMTP server received: (envelope recipients, parsed message) per mail."""

    def __init__(self) -> None:
        self.received: list[tuple[list[str], EmailMessage]] = []

    async def handle_DATA(self, server: SMTP, session: SMTPSession, envelope: Envelope) -> str:
        message = message_from_bytes(envelope.original_content or b"", policy=policy.default)
        self.received.append((list(envelope.rcpt_tos), message))  # type: ignore[arg-type]
        return "250 OK"

    def wait_for(self, to: str, timeout: float = 60) -> EmailMessage:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for recipients, message in self.received:
                if to in recipients:
                    return message
            time.sleep(0.2)
        raise AssertionError(f"no mail to {to} within {timeout} s; received: {[r for r, _ in self.received]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), _free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


@pytest.fixture(scope="module")
def mail_env(settings_env: dict[str, str], mailbox: tuple[Mailbox, int]) -> dict[str, str]:
    """The session's settings with mail on, and queues of their own (the session's worker has no mail)."""
    queue = f"kg-test-mail-{uuid.uuid4().hex[:8]}"
    return {**settings_env, "KG_TASK_QUEUE": queue, "KG_SIMILARITY_QUEUE": f"{queue}-similarity",
            "KG_SMTP_HOST": "127.0.0.1", "KG_SMTP_PORT": str(mailbox[1]), "KG_SMTP_SECURITY": "none",
            "KG_SMTP_FROM": SENDER, "KG_PUBLIC_URL": PUBLIC_URL + "/"}


@pytest.fixture(scope="module")
def mail_settings(mail_env: dict[str, str], settings: Settings) -> Settings:
    return Settings.from_variables(mail_env)


def _student(sessions: sessionmaker[Session], email: str | None) -> tuple[str, str]:
    """(login, API token) of a new student with this address."""
    login = f"mail-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, login, Role.student)
        user.full_name, user.email = "Ada Lovelace", email
        return login, issue_token(session, user, "t")


def test_a_failed_run_mails_the_student_why_with_the_link(
        mail_env: dict[str, str], mail_settings: Settings, sessions: sessionmaker[Session],
        mailbox: tuple[Mailbox, int], tmp_path: Path) -> None:
    box = mailbox[0]
    address = f"ada-{uuid.uuid4().hex[:6]}@uni.example.edu"
    _, token = _student(sessions, address)
    _, silent_token = _student(sessions, None)
    worker = WorkerProcess(mail_env, tmp_path / "worker.log")
    worker.start()
    try:
        with TestClient(create_app(mail_settings)) as client:
            archive = _zip_bytes([_symlink_entry("llmsys_hw4/src/combine.cu", "/etc/passwd")])
            run_id = submit_bytes(client, token, archive, tmp_path / "linked.zip")
            silent_id = submit_bytes(client, silent_token, archive, tmp_path / "silent.zip")
            run = wait_for_run(client, run_id, token)
            assert run["state"] == "failed" and run["error_class"] == "bad_archive", (run, worker.log())
            assert wait_for_run(client, silent_id, silent_token)["state"] == "failed"
        message = box.wait_for(address)
    finally:
        worker.stop()
    assert message["From"] == SENDER and message["To"] == address
    assert message["Subject"] == f"Run {run_id} of hw4: not graded"
    text = message.get_content().replace("\r\n", "\n")  # CRLF on the wire
    assert text.startswith("Hello Ada Lovelace,\n")
    assert f"It was not graded: {run['message']}" in text and "symbolic link" in text
    assert f"{PUBLIC_URL}/runs/{run_id}\n" in text
    assert not [m for _, m in box.received if m["Subject"].startswith(f"Run {silent_id} ")]  # no address, no mail
    assert f"run {silent_id}: no e-mail notice" in worker.log()


def _scored_run(settings: Settings, sessions: sessionmaker[Session], work_dir: Path, login: str,
                late_by: timedelta) -> tuple[int, Settings]:
    """A stand-in submission of `login`'s, uploaded `late_by` after the due time, and settings
    whose executor scores it on the CPU."""
    source = cpu_standin.make_cpu_submission(work_dir / "src" / "llmsys_hw4")
    archive = work_dir / "standin.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and path.suffix != ".so":
                zf.write(path, path.relative_to(source.parent).as_posix())
    run_settings = settings.model_copy(update={
        "gpu_grading": "on", "nvcc": str(cpu_standin.write_fake_nvcc(work_dir / "bin" / "nvcc")),
        "data_dir": work_dir / "data"})
    blob = BlobStore(run_settings.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        user = session.scalars(select(User).where(User.username == login)).one()
        submission, run = record_submission(session, user, get_assignment(session, "hw4"), "standin.zip", blob)
        submission.uploaded_at = get_assignment(session, "hw4").due_at + late_by  # type: ignore[operator]
        return run.id, run_settings


@pytest.fixture
def late_hw4(sessions: sessionmaker[Session]) -> Iterator[None]:
    """hw4 due a week ago, 1 h grace, 10 % per started day after it (restored afterwards)."""
    keys = ("due_at", "grace_s", "late_window_s", "late_penalty_per_day")
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        before = {k: getattr(hw4, k) for k in keys}
        hw4.due_at, hw4.grace_s, hw4.late_window_s, hw4.late_penalty_per_day = (
            utcnow() - timedelta(days=7), 3600, 30 * 86400, 0.1)
    yield
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        for key, value in before.items():
            setattr(hw4, key, value)


@pytest.mark.skipif(not cpu_standin.have_compiler(), reason="needs g++ for the CPU stand-in")
def test_a_scored_late_run_mails_the_penalized_grade_per_problem(
        mail_settings: Settings, sessions: sessionmaker[Session], mailbox: tuple[Mailbox, int],
        small_stage: None, work: Path, late_hw4: None) -> None:  # noqa: F811
    address = f"ada-{uuid.uuid4().hex[:6]}@uni.example.edu"
    login, _ = _student(sessions, address)
    run_id, run_settings = _scored_run(mail_settings, sessions, work, login, timedelta(hours=26))
    shutil.copytree(mail_settings.blob_dir, run_settings.blob_dir, dirs_exist_ok=True)
    executor = RunExecutor(run_settings, sessions, BlobStore(run_settings.blob_dir))
    assert executor.execute(run_id) is Disposition.done  # its checks: no mail until the run is final
    assert not any(address in recipients for recipients, _ in mailbox[0].received)
    assert executor.execute_timing(run_id) is Disposition.done
    with session_scope(sessions) as session:
        run = session.get(Run, run_id)
        assert run is not None and run.score is not None
        raw, problems = run.score, [(r.problem_id, r.title, r.points, r.max_points) for r in run.results]
    grade = round(raw * 0.8, 2)  # 26 h late, 1 h grace: two started days at 10 %
    message = mailbox[0].wait_for(address)
    assert message["Subject"] == f"Run {run_id} of hw4: {grade:g} / 100"
    text = message.get_content().replace("\r\n", "\n")  # CRLF on the wire
    assert f"Grade: {grade:g} / 100\nBefore the late penalty: {round(raw, 2):g}\nLateness: " in text
    for problem_id, title, points, max_points in problems:
        assert f"  {problem_id} {title}: {round(points, 2):g} / {max_points:g}\n" in text
    assert f"{PUBLIC_URL}/runs/{run_id}\n" in text


def test_a_mail_server_that_is_down_costs_only_the_notice(
        settings: Settings, sessions: sessionmaker[Session], caplog: pytest.LogCaptureFixture) -> None:
    """The executor records the outcome (here: an infrastructure failure after too many attempts)
    and logs the notice it could not send."""
    login, _ = _student(sessions, "nobody@uni.example.edu")
    down = settings.model_copy(update={"smtp": SmtpSettings(host="127.0.0.1", port=_free_port(), security="none",
                                                            from_=SENDER), "max_attempts": 0})
    with session_scope(sessions) as session:
        user = session.scalars(select(User).where(User.username == login)).one()
        blob = BlobStore(settings.blob_dir).put_bytes(b"never read")
        _, run = record_submission(session, user, get_assignment(session, "hw4"), "x.zip", blob)
        run_id = run.id
    assert RunExecutor(down, sessions, BlobStore(settings.blob_dir)).execute(run_id) is Disposition.done
    with session_scope(sessions) as session:
        recorded = session.get(Run, run_id)
        assert recorded is not None and recorded.state.value == "failed" and recorded.finished_at is not None
    assert f"run {run_id}: the e-mail notice could not be sent" in caplog.text
