"""Uploads under faults, with real services: a database that fails after (and during) the commit
of an upload's rows, re-sends that must not make a second submission (Idempotency-Key, the same
bytes within the re-send window), and the collector of orphan blobs and finished job folders.

The database faults stop a private PostgreSQL (tests/faults/services.py) at the instant named,
from a SQLAlchemy session event in the web app's own process: the fault is real (the server is
gone), only its timing is chosen.
"""
from __future__ import annotations

import hashlib
import io
import os
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, func, select, update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.cli.main import app as grader_cli
from grader.course.membership import enroll, get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import CourseRole, Role, Run, RunState, Submission, User, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings, get_settings
from grader.storage.blobstore import BlobStore
from grader.storage.collector import CollectReport, collect
from tests.faults.services import PrivatePostgres
from tests.fixtures import cpu_standin
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, drop_queues, init_with_course, new_student, run_row, wait_for_run
from tests.service.test_faults import graded_once, make_rig, standin_zip, unique  # noqa: F401 (a fixture)
from tests.service.test_faults import post as fault_post
from tests.service.test_security import PASSWORD, csrf_of, login

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the private PostgreSQL runs as the postgres user: root")


def fresh_zip(tag: str = "") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("llmsys_hw4/README.md", f"upload faults {tag} {uuid.uuid4().hex}")
    return buf.getvalue()


def post(client: TestClient, token: str, data: bytes, key: str | None = None):  # type: ignore[no-untyped-def]
    headers = {**auth(token), **({"Idempotency-Key": key} if key else {})}
    return client.post("/api/v1/submissions", headers=headers, files={"file": ("hw.zip", data, "application/zip")})


def post_form(client: TestClient, token: str, data: bytes):  # type: ignore[no-untyped-def]
    """An upload through the token form (the browser door without a login)."""
    return client.post("/upload", data={"token": token}, files={"file": ("hw.zip", data, "application/zip")})


def count_submissions(sessions: sessionmaker[Session], username: str) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count(Submission.id)).join(User, Submission.user_id == User.id)
                                  .where(User.username == username)) or 0)


# ---- a private PostgreSQL that fails at a chosen instant -------------------------------------


@dataclass
class FaultyDatabase:
    server: PrivatePostgres
    settings: Settings
    sessions: sessionmaker[Session]

    def student(self) -> tuple[str, str]:
        name = f"fault-{uuid.uuid4().hex[:8]}"
        with session_scope(self.sessions) as session:
            return name, issue_token(session, get_or_create_user(session, name, Role.student), "t")

    def __post_init__(self) -> None:
        self._listeners: list[tuple[str, Callable[[Session], None]]] = []

    def stop_when(self, hook: str) -> Callable[[], bool]:
        """Stop the server once, at the first `before_commit` or `after_commit` of a session that
        holds a submission (the upload's); returns "has it fired?"."""
        fired = threading.Event()

        def listener(session: Session) -> None:
            if not fired.is_set() and any(isinstance(o, Submission) for o in session.identity_map.values()):
                fired.set()
                self.server.stop()

        event.listen(Session, hook, listener)
        self._listeners.append((hook, listener))
        return fired.is_set

    def disarm(self) -> None:
        for hook, listener in self._listeners:
            event.remove(Session, hook, listener)
        self._listeners.clear()


@pytest.fixture(scope="module")
def private_db(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrivatePostgres, Settings]]:
    server = PrivatePostgres()
    # Its own queue (no worker consumes it) and data folder: only this module's runs are there.
    own = settings.model_copy(update={"database_url": server.url,
                                      "task_queue": f"kg-upload-faults-{uuid.uuid4().hex[:6]}",
                                      "data_dir": tmp_path_factory.mktemp("upload-faults")})
    server.start()
    try:
        init_with_course(own)
        yield server, own
    finally:
        server.close()
        drop_queues(own.task_queue)


@pytest.fixture
def faulty(private_db: tuple[PrivatePostgres, Settings]) -> Iterator[FaultyDatabase]:
    server, own = private_db
    db = FaultyDatabase(server, own, make_session_factory(make_engine(own)))
    try:
        yield db
    finally:
        db.disarm()
        if not (server.data / "postmaster.pid").exists():
            server.start()


# ---- a database error after the commit ---------------------------------------------------------


@needs_root
@pytest.mark.timeout(180)
def test_database_error_after_commit_answers_stored_and_the_keyed_resend_leaves_one(faulty: FaultyDatabase) -> None:
    name, token = faulty.student()
    data, key = fresh_zip("after commit, keyed"), uuid.uuid4().hex
    fired = faulty.stop_when("after_commit")
    with TestClient(create_app(faulty.settings)) as client:
        first = post(client, token, data, key)
        assert fired(), "the fault did not happen after the commit"
        faulty.server.start()
        again = post(client, token, data, key)
    # After the commit the answer is a success that says what was stored, never "nothing was recorded".
    assert first.status_code == 201, first.text
    body = first.json()
    assert "nothing was recorded" not in first.text.lower()
    assert body["queued"] is False and body["earlier_upload"] is False
    assert body["message"].startswith("Upload stored; grading will start"), body
    # The re-send with the same key is the same upload: the earlier submission and run, status 200.
    assert again.status_code == 200, again.text
    repeat = again.json()
    assert repeat["earlier_upload"] is True
    assert (repeat["submission_id"], repeat["run_id"]) == (body["submission_id"], body["run_id"])
    assert f"same upload as your submission {body['submission_id']}" in repeat["message"]
    assert count_submissions(faulty.sessions, name) == 1
    run = run_row(faulty.sessions, body["run_id"])
    assert run.state is RunState.queued and run.enqueued_at is not None, "the re-send did not send the stored run"
    assert BlobStore(faulty.settings.blob_dir).exists(body["sha256"])


@needs_root
@pytest.mark.timeout(180)
def test_database_error_after_commit_then_the_same_bytes_without_a_key_leave_one(faulty: FaultyDatabase) -> None:
    name, token = faulty.student()
    data = fresh_zip("after commit, no key")
    fired = faulty.stop_when("after_commit")
    with TestClient(create_app(faulty.settings)) as client:
        first = post(client, token, data)
        assert fired()
        faulty.server.start()
        again = post(client, token, data)  # no key: the same bytes within the re-send window
        other = post(client, token, fresh_zip("a different upload"))
    assert first.status_code == 201 and "nothing was recorded" not in first.text.lower(), first.text
    assert again.status_code == 200 and again.json()["earlier_upload"] is True, again.text
    assert again.json()["submission_id"] == first.json()["submission_id"]
    assert other.status_code == 201 and other.json()["earlier_upload"] is False
    assert count_submissions(faulty.sessions, name) == 2  # the re-sent one counted once, the other apart


@needs_root
@pytest.mark.timeout(180)
def test_database_error_after_commit_on_the_token_form_says_stored(faulty: FaultyDatabase) -> None:
    name, token = faulty.student()
    data = fresh_zip("after commit, form")
    fired = faulty.stop_when("after_commit")
    with TestClient(create_app(faulty.settings)) as client:
        page = post_form(client, token, data)
        assert fired()
        faulty.server.start()
        again = post_form(client, token, data)
    assert page.status_code == 201 and "Upload stored; grading will start" in page.text, page.text[:500]
    assert again.status_code == 200 and "same upload as your submission" in again.text
    assert count_submissions(faulty.sessions, name) == 1


@needs_root
@pytest.mark.timeout(180)
def test_database_error_during_the_commit_says_it_may_be_stored_and_the_resend_records_it_once(
        faulty: FaultyDatabase) -> None:
    """The commit itself fails: the server cannot know whether the rows were stored, so the
    answer says so (not "nothing was recorded") and tells how to send again safely."""
    name, token = faulty.student()
    data, key = fresh_zip("during commit"), uuid.uuid4().hex
    fired = faulty.stop_when("before_commit")
    with TestClient(create_app(faulty.settings)) as client:
        failed = post(client, token, data, key)
        assert fired()
        faulty.server.start()
        again = post(client, token, data, key)
        once_more = post(client, token, data, key)
    assert failed.status_code == 503 and "Retry-After" in failed.headers, failed.text
    error = failed.json()["error"]
    assert error["code"] == "outcome_unknown"
    assert "may or may not have been stored" in error["message"] and "same Idempotency-Key" in error["message"]
    assert "nothing was recorded" not in error["message"].lower()
    assert again.status_code == 201, again.text  # it was not stored: now it is, once
    assert once_more.status_code == 200 and once_more.json()["submission_id"] == again.json()["submission_id"]
    assert count_submissions(faulty.sessions, name) == 1


@needs_root
@pytest.mark.timeout(180)
def test_database_error_during_the_commit_on_the_token_form_says_it_may_be_stored(faulty: FaultyDatabase) -> None:
    name, token = faulty.student()
    data = fresh_zip("during commit, form")
    fired = faulty.stop_when("before_commit")
    with TestClient(create_app(faulty.settings)) as client:
        failed = post_form(client, token, data)
        assert fired()
        faulty.server.start()
        again = post_form(client, token, data)
    assert failed.status_code == 503 and failed.headers["content-type"].startswith("text/html"), failed.text[:300]
    assert "may or may not have been stored" in failed.text and f"the same file within {faulty.settings.upload_dedup_window_s:g} s" in failed.text
    assert "Idempotency-Key" not in failed.text and "nothing was recorded" not in failed.text.lower()
    assert again.status_code == 201 and count_submissions(faulty.sessions, name) == 1


# ---- idempotency without faults -------------------------------------------------------------------


def test_same_key_with_other_bytes_is_refused_and_stores_nothing(client: TestClient, sessions: sessionmaker[Session],
                                                                settings: Settings) -> None:
    name = f"idem-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, name, Role.student), "t")
    key = uuid.uuid4().hex
    first = post(client, token, fresh_zip("first"), key)
    other_bytes = fresh_zip("other bytes")
    clash = post(client, token, other_bytes, key)
    assert first.status_code == 201, first.text
    assert clash.status_code == 422, clash.text
    error = clash.json()["error"]
    assert error["code"] == "idempotency_key_reused"
    assert f"submission {first.json()['submission_id']}" in error["message"] and "new key" in error["message"]
    assert count_submissions(sessions, name) == 1
    assert not BlobStore(settings.blob_dir).exists(hashlib.sha256(other_bytes).hexdigest()), "the refused blob stayed"


def test_the_same_key_of_another_user_is_another_upload(client: TestClient, tokens: dict[str, str]) -> None:
    key, data = uuid.uuid4().hex, fresh_zip("shared key")
    alice, bob = post(client, tokens["alice"], data, key), post(client, tokens["bob"], data, key)
    assert alice.status_code == 201 and bob.status_code == 201, (alice.text, bob.text)
    assert alice.json()["submission_id"] != bob.json()["submission_id"]


def test_a_malformed_key_is_a_validation_error(client: TestClient, tokens: dict[str, str]) -> None:
    response = post(client, tokens["alice"], fresh_zip(), "x" * 129)
    assert response.status_code == 422 and response.json()["error"]["code"] == "validation_error"


def test_the_same_bytes_after_the_window_are_a_new_submission(client: TestClient, sessions: sessionmaker[Session],
                                                              settings: Settings) -> None:
    name = f"window-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, name, Role.student), "t")
    data = fresh_zip("window")
    first = post(client, token, data)
    with session_scope(sessions) as session:  # uploaded just outside the window
        session.execute(update(Submission).where(Submission.id == first.json()["submission_id"])
                        .values(uploaded_at=utcnow() - timedelta(seconds=settings.upload_dedup_window_s + 5)))
    later = post(client, token, data)
    assert later.status_code == 201 and later.json()["earlier_upload"] is False, later.text
    assert count_submissions(sessions, name) == 2


def test_the_token_form_answers_a_resend_with_the_earlier_upload(client: TestClient, sessions: sessionmaker[Session]) -> None:
    name = f"form-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, name, Role.student), "t")
    data = fresh_zip("form")
    pages = [post_form(client, token, data)
             for _ in range(2)]
    assert [p.status_code for p in pages] == [201, 200], [p.text[:300] for p in pages]
    assert "same upload as your submission" in pages[1].text
    assert count_submissions(sessions, name) == 1


def test_the_logged_in_form_answers_a_resend_with_the_earlier_upload(settings: Settings,
                                                                     sessions: sessionmaker[Session]) -> None:
    name = f"web-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    data = fresh_zip("logged-in form")
    with TestClient(create_app(settings)) as client:
        login(settings, name, client)
        sent = [client.post("/submit", data={"csrf_token": csrf_of(client.get("/").text)},
                            files={"file": ("hw.zip", data, "application/zip")}, follow_redirects=False)
                for _ in range(2)]
    assert sent[0].status_code == 303 and sent[0].headers["location"].startswith("/runs/"), sent[0].text
    run_id = sent[0].headers["location"].removeprefix("/runs/")
    assert sent[1].status_code == 200 and "same upload as your submission" in sent[1].text, sent[1].text[:500]
    assert f"run {run_id} grades it" in sent[1].text
    assert count_submissions(sessions, name) == 1


@pytest.mark.timeout(180)
def test_database_error_after_a_regrades_commit_still_leads_to_its_run(faulty: FaultyDatabase) -> None:
    """A re-grade from the gradebook whose rows are committed when the database fails is
    stored: the answer is its run page, not a 503 saying nothing was recorded."""
    _, token = faulty.student()
    staff = f"staff-{uuid.uuid4().hex[:8]}"
    with session_scope(faulty.sessions) as session:
        user = get_or_create_user(session, staff, Role.instructor)
        set_password(user, PASSWORD, SUITE_ARGON2)
        enroll(session, user, get_assignment(session, "hw4").course, CourseRole.instructor)
    with TestClient(create_app(faulty.settings)) as client:
        upload = post(client, token, fresh_zip("to be re-graded"))
        assert upload.status_code == 201, upload.text
        login(faulty.settings, staff, client)
        csrf = csrf_of(client.get("/gradebook?assignment=hw4").text)
        fired = faulty.stop_when("after_commit")
        answer = client.post(f"/submissions/{upload.json()['submission_id']}/regrade",
                             data={"csrf_token": csrf}, follow_redirects=False)
        assert fired(), "the fault did not happen after the commit"
        faulty.server.start()
    assert answer.status_code == 303 and answer.headers["location"].startswith("/runs/"), answer.text[:300]
    regrade = run_row(faulty.sessions, int(answer.headers["location"].removeprefix("/runs/")))
    assert regrade.submission_id == upload.json()["submission_id"] and regrade.state == RunState.queued


# ---- the collector ---------------------------------------------------------------------------------


def _age(store: BlobStore, sha256: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(store.path(sha256), (then, then))


def test_collector_removes_old_orphan_blobs_only(settings: Settings, sessions: sessionmaker[Session],
                                                tmp_path: Path) -> None:
    own = settings.model_copy(update={"data_dir": tmp_path / "data", "upload_max_duration_s": 600.0})
    store = BlobStore(own.blob_dir)
    old_orphan, young_orphan, old_used = (store.put_bytes(fresh_zip(t)) for t in ("old orphan", "young", "used"))
    with session_scope(sessions) as session:
        user = get_or_create_user(session, f"collect-{uuid.uuid4().hex[:8]}", Role.student)
        record_submission(session, user, get_assignment(session, "hw4"), "hw.zip", old_used)
    _age(store, old_orphan.sha256, 601)
    _age(store, old_used.sha256, 10_000)
    stale_tmp = own.blob_dir / "tmp" / "upload-killed"
    stale_tmp.write_bytes(b"half an upload")
    os.utime(stale_tmp, (time.time() - 601, time.time() - 601))

    report = collect(own, sessions)

    assert report.blobs == [old_orphan.sha256] and report.temp_files == ["upload-killed"]
    assert not store.exists(old_orphan.sha256)
    assert store.exists(young_orphan.sha256), "a young blob may be an upload not yet committed"
    assert store.exists(old_used.sha256), "a referenced blob was removed"
    assert collect(own, sessions).blobs == []


def test_collector_waits_for_an_upload_holding_the_lock_and_then_keeps_its_blob(
        settings: Settings, sessions: sessionmaker[Session], tmp_path: Path) -> None:
    """An upload of the same bytes holds the shared lock from the move until its commit: the
    collector's exclusive lock waits, and it sees the new row."""
    own = settings.model_copy(update={"data_dir": tmp_path / "data", "upload_max_duration_s": 600.0})
    store = BlobStore(own.blob_dir)
    blob = store.put_bytes(fresh_zip("racing upload"))
    _age(store, blob.sha256, 601)
    reports: list[CollectReport] = []
    with store.lock(blob.sha256):  # the upload, between moving its blob into place and committing
        collector = threading.Thread(target=lambda: reports.append(collect(own, sessions)))
        collector.start()
        collector.join(timeout=2)
        assert collector.is_alive(), "the collector did not wait for the upload's lock"
        with session_scope(sessions) as session:
            user = get_or_create_user(session, f"race-{uuid.uuid4().hex[:8]}", Role.student)
            record_submission(session, user, get_assignment(session, "hw4"), "hw.zip", blob)
    collector.join(timeout=30)
    assert store.exists(blob.sha256), "the collector removed a blob an upload had just committed"
    assert reports and reports[0].blobs == []


def test_collector_removes_finished_attempts_job_folders_and_keeps_the_one_in_progress(
        settings: Settings, sessions: sessionmaker[Session], tmp_path: Path) -> None:
    own = settings.model_copy(update={"data_dir": tmp_path / "data"})
    with session_scope(sessions) as session:
        user = get_or_create_user(session, f"jobs-{uuid.uuid4().hex[:8]}", Role.student)
        hw4 = get_assignment(session, "hw4")
        blob = BlobStore(own.blob_dir).put_bytes(fresh_zip("jobs"))
        _, done = record_submission(session, user, hw4, "a.zip", blob)
        _, active = record_submission(session, user, hw4, "b.zip", blob)
        session.flush()
        done.state, done.attempts, done.finished_at = RunState.scored, 1, utcnow()
        # The second attempt is in progress (a live claim); the first was a killed worker's.
        active.state, active.attempts, active.claimed_by, active.heartbeat_at = RunState.running, 2, "w@h", utcnow()
        done_id, active_id = done.id, active.id
    folders = {name: own.jobs_dir / name for name in
               (f"run-{done_id}-attempt-1", f"run-{active_id}-attempt-1", f"run-{active_id}-attempt-2", "scratch")}
    for path in folders.values():
        (path / "build").mkdir(parents=True)
        (path / "build" / "kernel.o").write_bytes(b"\0" * 1024)

    report = collect(own, sessions)

    assert sorted(report.job_folders) == sorted([f"run-{done_id}-attempt-1", f"run-{active_id}-attempt-1"])
    assert not folders[f"run-{done_id}-attempt-1"].exists() and not folders[f"run-{active_id}-attempt-1"].exists()
    assert folders[f"run-{active_id}-attempt-2"].is_dir(), "the folder of the attempt in progress was removed"
    assert folders["scratch"].is_dir(), "a folder that is not a job's was removed"
    with session_scope(sessions) as session:  # once the run is final, its last folder goes too
        session.execute(update(Run).where(Run.id == active_id)
                        .values(state=RunState.failed, claimed_by=None, finished_at=utcnow()))
    assert collect(own, sessions).job_folders == [f"run-{active_id}-attempt-2"]


def test_grader_collect_prints_what_it_removed(settings_env: dict[str, str], sessions: sessionmaker[Session],
                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    for key, value in {**settings_env, "KG_DATA_DIR": str(data_dir), "KG_UPLOAD_MAX_DURATION_S": "60"}.items():
        monkeypatch.setenv(key, value)
    store = BlobStore(data_dir / "blobs")
    orphan = store.put_bytes(fresh_zip("cli orphan"))
    _age(store, orphan.sha256, 61)
    (data_dir / "jobs" / "run-999999999-attempt-1").mkdir(parents=True)  # of no run
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(grader_cli, ["collect"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert f"removed blob {orphan.sha256}" in result.output
    assert "removed job folder run-999999999-attempt-1" in result.output
    assert "removed 1 orphan blob(s), 0 stale upload temp file(s), 1 finished job folder(s)" in result.output
    assert not store.exists(orphan.sha256) and not (data_dir / "jobs" / "run-999999999-attempt-1").exists()


@pytest.mark.timeout(300)
@needs_root
@pytest.mark.skipif(not cpu_standin.have_compiler(), reason="the CPU stand-in needs g++")
def test_collector_removes_a_killed_workers_job_folder_and_keeps_the_live_attempts(
        settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], standin_zip: bytes,
        tmp_path: Path) -> None:
    """Real worker processes: the first is SIGKILLed mid-grade (its folder stays behind), the
    second grades attempt 2; a collector pass meanwhile removes attempt 1's folder only."""
    rig = make_rig(settings, settings_env, sessions, tmp_path, data_dir=str(tmp_path / "data"))
    token = new_student(sessions, "collect-kill")
    first = rig.worker("collect-first")
    first.start()
    try:
        with rig.client() as client:
            run_id = fault_post(client, token, unique(standin_zip, "collector kill"))
            wait_for_run(client, run_id, token, timeout=120, until=lambda r: r["state"] == "running")
            first.kill()
    finally:
        first.stop()
    killed = rig.settings.jobs_dir / f"run-{run_id}-attempt-1"
    assert killed.is_dir(), "the killed attempt left no job folder"
    second = rig.worker("collect-second")
    second.start()
    try:
        with rig.client() as client:
            time.sleep(settings.heartbeat_timeout_s + 1)
            rig.reconcile()
            wait_for_run(client, run_id, token, timeout=120,
                         until=lambda r: r["attempts"] == 2 and r["state"] in ("building", "running"))
            report = collect(rig.settings, sessions)
            still_active = rig.run(run_id).state.value in ("building", "running")
            live = rig.settings.jobs_dir / f"run-{run_id}-attempt-2"
            assert not still_active or live.is_dir(), "the folder of the attempt in progress was removed"
            run = rig.settle([run_id])[run_id]
    finally:
        second.stop()
    assert report.job_folders == [killed.name]
    assert not killed.exists()
    graded_once(run)
    assert collect(rig.settings, sessions).job_folders == []  # the worker removed its own when it finished
