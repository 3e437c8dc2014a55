"""Fault injection with real services and real Celery worker processes: a worker SIGKILLed
mid-grade (its GPU stage running, on the CPU stand-in), Redis restarted with runs queued and in
flight, PostgreSQL restarted mid-grade and at upload, the blob disk and the job disk full.

Every submission must end graded exactly once (one outcome, one result set; a late duplicate
is skipped) or in a clear failed state with its upload kept, and an infrastructure failure
never replaces a good score. (Mid-build SIGKILL and a broker down at upload are in
test_grading.py and test_api.py.)

Redis and PostgreSQL are private instances (tests/faults/services.py) so that restarting them
cannot disturb anything else; they are stopped at the end even when a test fails.
"""
from __future__ import annotations

import html
import os
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.celery_app import make_celery
from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import ProblemResult, Role, Run, RunState, Submission, utcnow
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.runs.reconcile import reconcile
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.faults.services import PrivatePostgres, PrivateRedis
from tests.fixtures import cpu_standin
from tests.fixtures.zips import small_zip
from tests.service.conftest import PROJECT_ROOT, WorkerProcess, auth, init_with_course, new_student, wait_for_run

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="private PostgreSQL (runs as postgres) and tmpfs mounts need root"),
    pytest.mark.skipif(not cpu_standin.have_compiler(), reason="the CPU stand-in needs g++"),
]
FINAL = {"built", "scored", "failed"}


class SmallWorker(WorkerProcess):
    """A real worker process with the small CPU GPU stage (tests/faults/small_worker.py)."""

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.faults.small_worker", self.env["KG_TASK_QUEUE"]],
                                     cwd=PROJECT_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)


@dataclass
class Rig:
    """One queue, its settings, a client of the web app and the worker environment."""

    settings: Settings
    env: dict[str, str]
    sessions: sessionmaker[Session]
    tmp: Path

    def client(self) -> TestClient:
        return TestClient(create_app(self.settings))

    def worker(self, name: str, small: bool = True) -> WorkerProcess:
        cls = SmallWorker if small else WorkerProcess
        return cls(self.env, self.tmp / f"{name}.log")

    def reconcile(self) -> list[int]:
        return reconcile(self.settings, self.sessions, make_celery(self.settings)).resent

    def run(self, run_id: int) -> Run:
        with session_scope(self.sessions) as session:
            run = session.get(Run, run_id)
            assert run is not None
            _ = list(run.results)
            session.expunge_all()
            return run

    def settle(self, run_ids: list[int], timeout: float = 180) -> dict[int, Run]:
        """Reconcile until every run is final (a run a fault stranded needs the reconciler)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = {i: self.run(i) for i in run_ids}
            if all(r.state.value in FINAL for r in runs.values()):
                return runs
            if time.monotonic() > deadline:
                raise AssertionError({i: (r.state.value, r.attempts) for i, r in runs.items()})
            self.reconcile()
            time.sleep(1)


def graded_once(run: Run, state: str = "scored") -> None:
    assert run.state.value == state, (run.state, run.error_class, run.message)
    assert len(run.results) == 5, "exactly one result set"
    assert run.claimed_by is None and run.finished_at is not None
    if state == "scored":
        assert run.score == pytest.approx(sum(r.points for r in run.results))


@pytest.fixture(scope="module")
def standin_zip(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    source = cpu_standin.make_cpu_submission(tmp_path_factory.mktemp("standin") / "llmsys_hw4")
    archive = source.parent / "standin.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and path.suffix != ".so":
                zf.write(path, path.relative_to(source.parent).as_posix())
    return archive.read_bytes()


def unique(archive: bytes, tag: str) -> bytes:
    """The same submission with one more file: a different blob, so a different upload."""
    with tempfile.SpooledTemporaryFile() as buf:
        buf.write(archive)
        with zipfile.ZipFile(buf, "a") as zf:
            zf.writestr("llmsys_hw4/NOTES.txt", tag)
        buf.seek(0)
        return buf.read()


def make_rig(settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], tmp: Path,
             **changes: str) -> Rig:
    """A rig on its own queue; `changes` are KG_* variables (lower-case names) for both sides."""
    queue = f"{settings.task_queue}-fault-{uuid.uuid4().hex[:6]}"
    nvcc = cpu_standin.write_fake_nvcc(cpu_standin.sandbox_visible_dir("kg-fault-nvcc-") / "nvcc")
    values = {"task_queue": queue, "gpu_grading": "on", "nvcc": str(nvcc), "requeue_after_s": "2", **changes}
    env = {**settings_env, **{f"KG_{k.upper()}": str(v) for k, v in values.items()}}
    own = Settings.from_variables(env)
    return Rig(own, env, sessions, tmp)


def post(client: TestClient, token: str, data: bytes) -> int:
    response = client.post("/api/v1/submissions", headers=auth(token), files={"file": ("hw.zip", data)})
    assert response.status_code == 201, response.text
    return int(response.json()["run_id"])


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


# ---- SIGKILL mid-grade ---------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_worker_killed_mid_grade_is_scored_once(settings: Settings, settings_env: dict[str, str],
                                               sessions: sessionmaker[Session], tokens: dict[str, str],
                                               standin_zip: bytes, tmp_path: Path) -> None:
    rig = make_rig(settings, settings_env, sessions, tmp_path)
    first = rig.worker("first")
    first.start()
    try:
        student = new_student(sessions, "killed")
        with rig.client() as client:
            run_id = post(client, student, unique(standin_zip, "kill mid-grade"))
            wait_for_run(client, run_id, student, timeout=120, until=lambda r: r["state"] == "running")
            time.sleep(0.5)  # children of the GPU stage are at work
            first_job = str(rig.settings.jobs_dir / f"run-{run_id}-attempt-1")
            children = _processes_mentioning(first_job)
            first.kill()
    finally:
        first.stop()
    assert children, "the GPU stage had no sandboxed child running: the kill was not mid-grade"
    assert rig.run(run_id).state.value == "running"  # claimed by a dead worker
    second = rig.worker("second")
    second.start()
    try:
        time.sleep(settings.heartbeat_timeout_s + 1)
        assert run_id in rig.reconcile()
        run = rig.settle([run_id])[run_id]
    finally:
        second.stop()
    graded_once(run)
    assert run.attempts == 2
    assert RunExecutor(rig.settings, sessions, BlobStore(rig.settings.blob_dir)).execute(run_id) is Disposition.skipped
    assert rig.run(run_id).attempts == 2
    assert _processes_mentioning(first_job) == [], "sandboxed children outlived their worker"


# ---- Redis restarts ------------------------------------------------------------------------


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.timeout(300)
def test_redis_restart_loses_no_run(settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session],
                                    tokens: dict[str, str], standin_zip: bytes, tmp_path: Path,
                                    private_redis: PrivateRedis) -> None:
    rig = make_rig(settings, settings_env, sessions, tmp_path, broker_url=private_redis.url)
    worker = rig.worker("redis")
    # Five students, so fair share sends each upload to the broker at once (one run in flight each).
    who = [new_student(sessions, "redis") for _ in range(5)]
    with rig.client() as client:
        queued = [post(client, who[i], unique(standin_zip, f"redis queued {i}")) for i in range(3)]
        private_redis.restart()  # the three messages die with it (no persistence)
        worker.start()
        try:
            time.sleep(3)
            assert all(rig.run(i).state.value == "queued" for i in queued), "the messages were lost"
            in_flight = post(client, who[3], unique(standin_zip, "redis in flight"))
            wait_for_run(client, in_flight, who[3], timeout=120, until=lambda r: r["state"] != "queued")
            private_redis.restart()  # while the worker holds the message
            after = post(client, who[4], unique(standin_zip, "redis after"))
            runs = rig.settle([*queued, in_flight, after])
        finally:
            worker.stop()
    for run in runs.values():
        graded_once(run)
    assert [runs[i].attempts for i in queued] == [1, 1, 1]


# ---- PostgreSQL restarts -------------------------------------------------------------------


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.timeout(300)
def test_postgres_restart_mid_grade_and_at_upload(settings: Settings, settings_env: dict[str, str],
                                                  standin_zip: bytes, tmp_path: Path,
                                                  private_postgres: PrivatePostgres) -> None:
    own = settings.model_copy(update={"database_url": private_postgres.url})
    init_with_course(own)
    sessions = make_session_factory(make_engine(own))
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, "carol", Role.student), "faults")
    rig = make_rig(own, settings_env, sessions, tmp_path, database_url=private_postgres.url)
    worker = rig.worker("postgres")
    worker.start()
    try:
        with rig.client() as client:
            run_id = post(client, token, unique(standin_zip, "postgres mid-grade"))
            wait_for_run(client, run_id, token, timeout=120, until=lambda r: r["state"] == "running")
            private_postgres.stop()
            refused = client.post("/api/v1/submissions", headers=auth(token),
                                  files={"file": ("hw.zip", unique(standin_zip, "postgres down"))})
            refused_form = client.post("/upload", data={"token": token},  # the token is checked mid-body
                                       files={"file": ("hw.zip", unique(standin_zip, "postgres down, form"))})
            time.sleep(2)  # the worker's heartbeat, or its finish, meets the outage
            private_postgres.start()
            runs = rig.settle([run_id])
            accepted = post(client, token, unique(standin_zip, "postgres back"))
            runs.update(rig.settle([accepted]))
    finally:
        worker.stop()
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable", refused.text
    assert "Retry-After" in refused.headers
    assert refused_form.status_code == 503 and "Retry-After" in refused_form.headers, refused_form.text
    for run in runs.values():
        graded_once(run)
    with session_scope(sessions) as session:
        assert session.scalar(select(func.count(Submission.id))) == 2, "the refused upload was not recorded"


# ---- full disks ------------------------------------------------------------------------------


@pytest.fixture
def small_disk() -> Iterator[Callable[[Path, str], None]]:
    """mount(path, size): a tmpfs of `size` at `path`; unmounted at the end."""
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
        mounted.append(path)

    try:
        yield mount
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", str(path)], check=False)


def test_full_blob_disk_refuses_the_upload_and_keeps_the_rest(settings: Settings, tokens: dict[str, str],
                                                              sessions: sessionmaker[Session], tmp_path: Path,
                                                              small_disk: Callable[[Path, str], None]) -> None:
    own = settings.model_copy(update={"data_dir": tmp_path / "data", "broker_url": "redis://127.0.0.1:1/0"})
    small_disk(own.blob_dir, "256k")
    before = _submissions(sessions)
    with TestClient(create_app(own)) as client:
        kept = client.post("/api/v1/submissions", headers=auth(tokens["alice"]),
                           files={"file": ("small.zip", small_zip(b"fits"))})
        full = client.post("/api/v1/submissions", headers=auth(tokens["alice"]),
                           files={"file": ("big.zip", _random_zip(400 * 1024))})
        subprocess.run(["mount", "-o", "remount,size=2m", str(own.blob_dir)], check=True)  # space again
        again = client.post("/api/v1/submissions", headers=auth(tokens["alice"]),
                            files={"file": ("big.zip", _random_zip(400 * 1024))})
    assert kept.status_code == 201 and again.status_code == 201
    assert full.status_code >= 400 and full.status_code != 413, full.text
    assert _submissions(sessions) == before + 2, "the refused upload was recorded"
    assert list((own.blob_dir / "tmp").iterdir()) == [], "a partial upload was left behind"
    assert BlobStore(own.blob_dir).exists(kept.json()["sha256"]), "an earlier upload was damaged"


def test_full_blob_disk_is_the_servers_error(settings: Settings, tokens: dict[str, str], tmp_path: Path,
                                            small_disk: Callable[[Path, str], None]) -> None:
    """507 with a message that puts the fault on the server, on the API and on the token form
    (a page, not JSON); nothing is stored, not even a temp file."""
    own = settings.model_copy(update={"data_dir": tmp_path / "data", "broker_url": "redis://127.0.0.1:1/0"})
    small_disk(own.blob_dir, "128k")
    with TestClient(create_app(own)) as client:
        full = client.post("/api/v1/submissions", headers=auth(tokens["alice"]),
                           files={"file": ("big.zip", _random_zip(400 * 1024))})
        page = client.post("/upload", data={"token": tokens["alice"]},
                           files={"file": ("big.zip", _random_zip(400 * 1024))})
    assert full.status_code == 507, full.text
    error = full.json()["error"]
    assert error["code"] == "insufficient_storage"
    assert "out of storage space" in error["message"] and "Nothing was stored" in error["message"]
    assert "not with your submission" in error["message"] and "try again later" in error["message"]
    assert page.status_code == 507 and page.headers["content-type"].startswith("text/html")
    assert error["message"] in html.unescape(page.text)
    assert _stored_files(own.blob_dir) == []


def test_other_blob_disk_failures_are_the_servers_error_too(settings: Settings, tokens: dict[str, str],
                                                            tmp_path: Path,
                                                            small_disk: Callable[[Path, str], None]) -> None:
    own = settings.model_copy(update={"data_dir": tmp_path / "data", "broker_url": "redis://127.0.0.1:1/0"})
    small_disk(own.blob_dir, "1m")
    subprocess.run(["mount", "-o", "remount,ro", str(own.blob_dir)], check=True)
    with TestClient(create_app(own)) as client:
        refused = client.post("/api/v1/submissions", headers=auth(tokens["alice"]),
                              files={"file": ("a.zip", small_zip(b"read-only"))})
        no_file = client.post("/api/v1/submissions", headers=auth(tokens["alice"]),
                              files={"assignment": (None, "hw4")})
    assert refused.status_code == 500 and refused.json()["error"]["code"] == "internal_error", refused.text
    assert "Nothing was stored" in refused.json()["error"]["message"]
    assert no_file.status_code == 422, "bad input stays the client's error whatever the disk"


def _random_zip(size: int) -> bytes:
    """A whole zip of about `size` bytes (one stored entry of random bytes): fresh bytes each call."""
    with tempfile.SpooledTemporaryFile() as buf:
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("llmsys_hw4/NOTES.bin", os.urandom(size))
        buf.seek(0)
        return buf.read()


def _stored_files(blob_dir: Path) -> list[Path]:
    return [p for p in blob_dir.rglob("*") if p.is_file()]


def _submissions(sessions: sessionmaker[Session]) -> int:
    with session_scope(sessions) as session:
        return session.scalar(select(func.count(Submission.id))) or 0


@pytest.mark.timeout(300)
def test_full_job_disk_is_an_infra_error_and_keeps_the_good_score(
    settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], tokens: dict[str, str],
    standin_zip: bytes, tmp_path: Path, small_disk: Callable[[Path, str], None],
) -> None:
    rig = make_rig(settings, settings_env, sessions, tmp_path, max_attempts="1", data_dir=str(tmp_path / "data"))
    name = f"dave-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, name, Role.student)
        blob = BlobStore(rig.settings.blob_dir).put_bytes(unique(standin_zip, "good score"))
        sub, good = record_submission(session, user, get_assignment(session, "hw4"), "hw.zip", blob)
        good.state, good.score, good.finished_at = RunState.scored, 88.0, utcnow()
        good.results.append(ProblemResult(problem_id="1.1", title="Softmax forward", status="passed",
                                          points=20.0, max_points=20.0))
        sub_id, sha = sub.id, blob.sha256
    worker = rig.worker("jobs-full", small=False)
    worker.start()
    try:
        # The disk fills once the worker took its first job: its start check builds the kits in the
        # jobs dir, and a worker that cannot refuses jobs (test_worker_toolchain.py)
        deadline = time.monotonic() + 240
        while "toolchain checked" not in worker.log():
            assert worker.proc is not None and worker.proc.poll() is None and time.monotonic() < deadline, worker.log()
            time.sleep(0.5)
        small_disk(rig.settings.jobs_dir, "64k")  # the stand-in unpacks to ~220 KB
        with rig.client() as client:
            regrade = client.post(f"/api/v1/submissions/{sub_id}/regrade", headers=auth(tokens["staff"]))
            assert regrade.status_code == 201, regrade.text
            run = rig.settle([regrade.json()["run_id"]])[regrade.json()["run_id"]]
            book = client.get("/api/v1/assignments/hw4/gradebook", headers=auth(tokens["staff"])).json()
    finally:
        worker.stop()
    assert run.state.value == "failed" and run.error_class.value == "infra_error", (run.state, run.message)
    assert "not a problem with your code" in (run.message or "") and run.score is None
    assert BlobStore(rig.settings.blob_dir).exists(sha), "the upload was not kept"
    row = next(r for r in book["rows"] if r["user"] == name)
    assert row["total"] == 88.0, "an infrastructure failure replaced a good score"
