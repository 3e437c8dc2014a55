"""Recovery from lost work with real services and real Celery worker processes (issue 19): a
queued run's broker message lost, the worker's claim transaction failing on the database, the
run page of a run that waits to be re-sent, and a paused worker's result discarded.

The 15-minute fallback (`requeue_after_s` 900 s, the default) is kept, so a run recovered here
was recovered by the mechanism under test, within a wait of minutes; the thresholds of those
mechanisms are seconds (`resend_unheld_after_s` 3 s against 20 s, `reconcile_interval_s` 2 s
against 30 s, `claim_retry_after_s` 1 s against 5 s) so the suite does not sit through the
defaults. Redis and PostgreSQL are private instances
(tests/faults/services.py); the faults are real: a message deleted from Redis, PostgreSQL
stopped while the worker claims, a worker process stopped with SIGSTOP.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.celery_app import make_celery
from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Role, Run, RunState, utcnow
from grader.passwords import set_password
from grader.reads.runstatus import RESEND_TEXT, Waiting, waiting_reason
from grader.runs import lifecycle
from grader.runs.dispatch import held_runs, queue_lengths, run_signature
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore, StoredBlob
from tests.faults.services import PrivatePostgres, PrivateRedis
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import (
    PROJECT_ROOT,
    WorkerProcess,
    auth,
    drop_queues,
    init_with_course,
    new_student,
    queued_messages,
    wait_for_run,
)
from tests.service.test_faults import (  # noqa: F401  (fixtures)
    Rig,
    graded_once,
    make_rig,
    post,
    private_postgres,
    private_redis,
    pytestmark,
    standin_zip,
    unique,
)
from tests.service.test_web_settings import PASSWORD, Browser

# make_rig's own requeue_after_s (2 s) would hide the recovery
DEFAULTS = {"requeue_after_s": "900", "resend_unheld_after_s": "3", "reconcile_interval_s": "2",
            "claim_retry_after_s": "1"}


def _wait_for_log(worker: WorkerProcess, text: str, timeout: float, times: int = 1) -> None:
    deadline = time.monotonic() + timeout
    while worker.log_path.read_text(errors="replace").count(text) < times:
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not {times} times in the worker log in {timeout} s:\n{worker.log()}")
        time.sleep(0.2)


def _wait_final(rig: Rig, run_id: int, timeout: float) -> float:
    """Seconds until the run is final; no reconciling here (the recovery under test must do it)."""
    start = time.monotonic()
    while rig.run(run_id).state.value not in {"built", "scored", "failed"}:
        if time.monotonic() - start > timeout:
            raise AssertionError(f"run {run_id} not final in {timeout} s: {rig.run(run_id).state}")
        time.sleep(0.5)
    return time.monotonic() - start


class Reconciler:
    """`grader reconcile --loop` as its own process, as production runs it, on this checkout's
    code (PYTHONPATH: the `grader` script imports the installed package, maybe another checkout)."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(PROJECT_ROOT)}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Reconciler:
        self.proc = subprocess.Popen([str(Path(sys.executable).with_name("grader")), "reconcile", "--loop"],
                                     cwd=PROJECT_ROOT, env=self.env, stdout=self.log_path.open("ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=30)


# ---- the broker's view -----------------------------------------------------------------------


def test_held_runs_sees_waiting_messages_and_misses_deleted_ones(settings: Settings) -> None:
    """Ordinary and re-sent messages (each priority's own list) are all seen and counted."""
    queue = f"kg-held-{uuid.uuid4().hex[:8]}"
    own = settings.model_copy(update={"task_queue": queue})
    celery = make_celery(own)
    try:
        run_signature(celery, 910_001, queue).apply_async()
        run_signature(celery, 910_002, queue).apply_async()
        run_signature(celery, 910_003, queue, resent=True).apply_async()
        held = held_runs(celery, [queue])
        assert held is not None and {910_001, 910_002, 910_003} <= held
        assert queue_lengths(celery, [queue]) == {queue: 3}
        drop_queues(queue)  # the broker loses them
        held = held_runs(celery, [queue])
        assert held is not None and not {910_001, 910_002, 910_003} & held
    finally:
        drop_queues(queue)
    unreachable = make_celery(own.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"}))
    assert held_runs(unreachable, [queue]) is None, "an unreadable broker must mean 'cannot tell'"


# ---- a lost message ----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_lost_broker_message_is_resent_and_graded_once(
    settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], standin_zip: bytes,
    tmp_path: Path, private_redis: PrivateRedis,
) -> None:
    rig = make_rig(settings, settings_env, sessions, tmp_path, broker_url=private_redis.url, **DEFAULTS)
    student = new_student(sessions, "lost")
    with rig.client() as client:
        run_id = post(client, student, unique(standin_zip, "lost message"))
    queue = rig.settings.task_queue
    assert rig.run(run_id).enqueued_at is not None and len(queued_messages(queue, url=private_redis.url)) == 1
    drop_queues(queue, url=private_redis.url)  # the message is lost; no worker had taken it
    lost_at = time.monotonic()
    worker = rig.worker("lost")
    worker.start()
    try:
        with Reconciler(rig.env, tmp_path / "reconciler.log"):
            _wait_final(rig, run_id, timeout=120)
    finally:
        worker.stop()
    recovered = time.monotonic() - lost_at
    print(f"lost broker message: graded {recovered:.1f} s after the loss")
    run = rig.run(run_id)
    graded_once(run)
    assert run.attempts == 1, "graded exactly once, on the re-sent message"
    assert "no longer holds the tasks of queued runs" in (tmp_path / "reconciler.log").read_text()


# ---- the claim transaction fails ---------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_claim_that_fails_on_the_database_is_retried_not_acknowledged(
    settings: Settings, settings_env: dict[str, str], standin_zip: bytes, tmp_path: Path,
    private_postgres: PrivatePostgres,
) -> None:
    own = settings.model_copy(update={"database_url": private_postgres.url})
    init_with_course(own)
    sessions = make_session_factory(make_engine(own))
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, "claimer", Role.student), "faults")
    rig = make_rig(own, settings_env, sessions, tmp_path, database_url=private_postgres.url, **DEFAULTS)
    with rig.client() as client:
        run_id = post(client, token, unique(standin_zip, "claim fails"))  # waits in Redis: no worker yet
    private_postgres.stop()
    worker = rig.worker("claim")
    worker.start()
    try:
        _wait_for_log(worker, "the database failed around the claim; retrying", timeout=60)
        private_postgres.start()
        elapsed = _wait_final(rig, run_id, timeout=120)  # no reconciler: only the worker's retry
    finally:
        worker.stop()
    print(f"failed claim: graded {elapsed:.1f} s after the database came back")
    run = rig.run(run_id)
    graded_once(run)
    assert run.attempts == 1, "the failed claim must not count as an attempt"
    assert "retry: Retry in" in worker.log_path.read_text(errors="replace"), "the task was not retried by Celery"


@pytest.mark.timeout(300)
def test_a_database_outage_right_after_a_saved_claim_is_retried_within_seconds(
    settings: Settings, settings_env: dict[str, str], standin_zip: bytes, tmp_path: Path,
    private_postgres: PrivatePostgres,
) -> None:
    """PostgreSQL stops the moment the worker's claim is committed (a real stop, from the worker:
    tests/faults/small_worker.py) and stays down past the grade and the worker's tries to record
    it: the task is retried by Celery with its claim, takes it back (one attempt) and the run is
    graded seconds after the database is back, with no reconciler. Before, the task ended on the
    next statement with the claim saved, and only the reconciler freed it once its heartbeat was
    stale: about 90 s."""
    own = settings.model_copy(update={"database_url": private_postgres.url})
    init_with_course(own)
    sessions = make_session_factory(make_engine(own))
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, "after-claim", Role.student), "faults")
    rig = make_rig(own, settings_env, sessions, tmp_path, database_url=private_postgres.url, **DEFAULTS)
    worker = rig.worker("after-claim")
    worker.env["KG_FAULT_STOP_DB_AFTER_CLAIM"] = json.dumps(private_postgres.stop_argv())
    with rig.client() as client:
        run_id = post(client, token, unique(standin_zip, "outage after the claim"))
    worker.start()
    try:
        _wait_for_log(worker, f"fault: the database was stopped right after the claim of run {run_id}", timeout=90)
        _wait_for_log(worker, f"run {run_id}: record the outcome: the database failed", timeout=90)
        private_postgres.start()
        back_at = time.monotonic()
        _wait_for_log(worker, f"run {run_id}: stage unpack", timeout=60, times=2)  # grading again
        again = time.monotonic() - back_at
        _wait_final(rig, run_id, timeout=120)  # no reconciler: only the worker's own retry
    finally:
        worker.stop()
    print(f"database down after the claim: grading again {again:.1f} s after it came back")
    run = rig.run(run_id)
    graded_once(run)
    assert run.attempts == 1, "the claim taken back is the same attempt"
    log = worker.log_path.read_text(errors="replace")
    assert "progress not recorded (database error); grading goes on" in log
    assert "retry: Retry in" in log, "the task was not retried by Celery"


def test_a_claim_saved_whose_answer_was_lost_is_taken_back_by_its_task(
    settings: Settings, sessions: sessionmaker[Session],
) -> None:
    """The claim's commit reached the database but its answer did not (the connection broke):
    the executor says `unclaimed` (its task retries with the same identity), and only that
    identity can take the claim back, as the same attempt; anyone else skips the run."""
    with session_scope(sessions) as session:
        user = get_or_create_user(session, f"lost-answer-{uuid.uuid4().hex[:6]}", Role.student)
        blob = StoredBlob(sha256="cd" * 32, size=1)
        _, run = record_submission(session, user, get_assignment(session, "hw4"), "a.zip", blob)
        session.flush()
        run_id = run.id
    executor = RunExecutor(settings, sessions, BlobStore(settings.blob_dir))

    def answer_lost(session: Session) -> None:
        raise OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))

    claim_run = lifecycle.claim_run

    def claim_and_lose_the_answer(session: Session, *args: Any) -> bool:
        claimed = claim_run(session, *args)
        event.listen(session, "after_commit", answer_lost, once=True)
        return claimed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lifecycle, "claim_run", claim_and_lose_the_answer)
        assert executor.execute(run_id, "task-a") is Disposition.unclaimed
    held = RunExecutor(settings, sessions, BlobStore(settings.blob_dir))
    with session_scope(sessions) as session:
        run = session.get(Run, run_id)
        assert run is not None and (run.claimed_by, run.attempts) == ("task-a", 1), "the claim was saved"
        stale_before = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s)
        assert not lifecycle.claim_run(session, run_id, "task-b", stale_before), "another task took a live claim"
        assert lifecycle.claim_run(session, run_id, "task-a", stale_before), "the task could not take its claim back"
        session.refresh(run)
        assert run.attempts == 1, "taking a claim back is the same attempt"
        run.state, run.claimed_by, run.finished_at = RunState.failed, None, utcnow()  # no grading here
    assert held.execute(run_id, "task-a") is Disposition.skipped  # final now


# ---- the run page of a run that waits to be re-sent --------------------------------------------


@pytest.mark.timeout(300)
def test_the_run_page_promises_no_eta_for_a_run_waiting_to_be_resent(
    settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], standin_zip: bytes,
    tmp_path: Path, private_redis: PrivateRedis,
) -> None:
    rig = make_rig(settings, settings_env, sessions, tmp_path, broker_url=private_redis.url, **DEFAULTS)
    name = f"resend-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, name, Role.student)
        set_password(user, PASSWORD, SUITE_ARGON2)
        token = issue_token(session, user, "t")
    private_redis.stop()  # the broker is down at upload: the run cannot be sent
    with rig.client() as client:
        response = client.post("/api/v1/submissions", headers=auth(token), files={"file": ("hw.zip", unique(
            standin_zip, "resend page"))})
    assert response.status_code == 201, response.text
    run_id = int(response.json()["run_id"])
    browser = Browser(rig.settings, name)
    status = browser.client.get(f"/runs/{run_id}/status").json()
    assert status["state"] == "queued" and status["waiting"] == "resend"
    assert status["queue_position"] is None and status["eta_s"] is None
    assert status["progress_text"] == RESEND_TEXT
    page = browser.client.get(f"/runs/{run_id}").text
    assert "Waiting to be re-sent" in page and "Position" not in page and "estimated result" not in page
    private_redis.start()
    assert run_id in rig.reconcile()  # back in the broker's queue: a place and a position again
    status = browser.client.get(f"/runs/{run_id}/status").json()
    assert status["waiting"] == "sent" and status["queue_position"] is not None
    assert status["progress_text"].startswith("Position ")


def test_waiting_reason_tells_a_run_behind_the_students_own_from_one_to_resend(
    sessions: sessionmaker[Session],
) -> None:
    with session_scope(sessions) as session:
        user = get_or_create_user(session, f"why-{uuid.uuid4().hex[:6]}", Role.student)
        blob = StoredBlob(sha256="ab" * 32, size=1)
        _, first = record_submission(session, user, get_assignment(session, "hw4"), "a.zip", blob)
        _, second = record_submission(session, user, get_assignment(session, "hw4"), "b.zip", blob)
        first.enqueued_at = utcnow()
        session.flush()
        assert (waiting_reason(session, first), waiting_reason(session, second)) == (Waiting.sent, Waiting.behind_own)
        first.enqueued_at = None  # its message was lost: marked unsent by the reconciler
        session.flush()
        assert waiting_reason(session, first) is Waiting.resend
        session.rollback()


# ---- a paused worker's result ------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_paused_workers_result_is_logged_as_discarded(
    settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], standin_zip: bytes,
    tmp_path: Path,
) -> None:
    rig = make_rig(settings, settings_env, sessions, tmp_path, **DEFAULTS)
    paused, second = rig.worker("paused"), rig.worker("second")
    paused.start()
    try:
        student = new_student(sessions, "paused")
        with rig.client() as client:
            run_id = post(client, student, unique(standin_zip, "paused worker"))
            wait_for_run(client, run_id, student, timeout=120, until=lambda r: r["state"] == "running")
        assert paused.proc is not None
        os.killpg(paused.proc.pid, signal.SIGSTOP)
        second.start()
        time.sleep(settings.heartbeat_timeout_s + 1)
        assert run_id in rig.reconcile(), "the stale claim was not requeued"
        _wait_final(rig, run_id, timeout=120)
        graded = rig.run(run_id)
        os.killpg(paused.proc.pid, signal.SIGCONT)
        _wait_for_log(paused, "succeeded", timeout=120)
    finally:
        if paused.proc is not None and paused.proc.poll() is None:
            os.killpg(paused.proc.pid, signal.SIGCONT)
        paused.stop()
        second.stop()
    graded_once(graded)
    assert graded.attempts == 2
    log = paused.log_path.read_text(errors="replace")
    assert f"run {run_id}: result discarded" in log and "'discarded'" in log, log[-3000:]
    assert "'done'" not in log, "the paused worker reported its discarded result as done"
    after = rig.run(run_id)
    assert (after.score, after.finished_at, after.attempts) == (graded.score, graded.finished_at, 2)
    assert f"run {run_id}: result discarded" not in second.log_path.read_text(errors="replace")
