"""Service tests: real PostgreSQL (a fresh database per session, schema from Alembic), real
Redis as the Celery broker, real Celery worker processes, real nvcc.

PostgreSQL and Redis are expected on 127.0.0.1 (KG_TEST_PG_URL / KG_TEST_REDIS_URL to change;
tests/conftest.py stops the run in one line when they do not answer).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
import uvicorn
from fastapi.testclient import TestClient
from kombu import Connection
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.celery_app import REDIS_PRIORITY_STEPS
from grader.cli.main import init_database
from grader.course.courses import course_of_free_assignments
from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Role, Run
from grader.runs.dispatch import queue_keys
from grader.settings import Settings
from tests.conftest import PG_ADMIN_URL, REDIS_URL
from worker.rubric import load_rubric

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FINAL = {"built", "scored", "failed"}


@contextmanager
def redis_channel(url: str = REDIS_URL) -> Iterator[Any]:
    """kombu's Redis channel with the app's priority steps, to read or clear a queue's lists."""
    with Connection(url, transport_options={"priority_steps": REDIS_PRIORITY_STEPS}) as connection:
        yield connection.default_channel


def drop_queues(*queues: str, url: str = REDIS_URL) -> None:
    """Delete every message the broker holds in `queues` (all their priority lists)."""
    with redis_channel(url) as channel:
        channel.client.delete(*queue_keys(channel, queues))


def queued_messages(queue: str, url: str = REDIS_URL) -> list[dict[str, Any]]:
    """The messages waiting in `queue`, in the order a worker takes them: kombu pops the list of
    the lowest priority step first, each list from its right end."""
    with redis_channel(url) as channel:
        keys = [channel._q_for_pri(queue, step) for step in channel.priority_steps]
        return [json.loads(raw) for key in keys for raw in reversed(channel.client.lrange(key, 0, -1))]


@contextmanager
def fresh_database(prefix: str) -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        pytest.exit(f"PostgreSQL at {PG_ADMIN_URL} (KG_TEST_PG_URL) cannot create the tests' database: {reason}; "
                    f"its role needs CREATEDB (`ALTER ROLE {urlsplit(PG_ADMIN_URL).username} CREATEDB`) and a login the URL carries",
                    returncode=pytest.ExitCode.USAGE_ERROR)
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with fresh_database("kg_test") as url:
        yield url


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind, for a migration test to fill at the revision it starts from."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kg.db'}"
        return
    with fresh_database("kg_mig") as url:
        yield url


@pytest.fixture(scope="session")
def settings_env(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """KG_* variables shared by the in-process app and the worker processes."""
    queue = f"kg-test-{uuid.uuid4().hex[:8]}"
    env = {
        "KG_DATABASE_URL": database_url,
        "KG_BROKER_URL": REDIS_URL,
        "KG_DATA_DIR": str(tmp_path_factory.mktemp("kgdata")),
        # One build cache for every data dir of the session: each worker's start check builds
        # every assignment's kit, from this cache after the first (grader/runs/worker_start.py)
        "KG_BUILD_CACHE_DIR": str(tmp_path_factory.mktemp("build-cache")),
        "KG_TASK_QUEUE": queue,
        "KG_SIMILARITY_QUEUE": f"{queue}-similarity",
        "KG_HEARTBEAT_INTERVAL_S": "1",
        "KG_HEARTBEAT_TIMEOUT_S": "4",
        "KG_MAX_UPLOAD_BYTES": str(2 * 1024 * 1024),
        # Every TestClient comes from the one address "testclient": the suite's wrong passwords
        # and tokens must not add up to an address block (test_login_throttle.py sets its own)
        "KG_THROTTLE_ADDRESS_FREE": "100000",
        "KG_THROTTLE_ADDRESS_LOCK_AFTER": "100000",
    }
    yield env
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(queue, f"{queue}-similarity")


COURSE = "llmsys"  # the test databases' course, holding hw4 (new users join every course)


def init_with_course(settings: Settings, course: str = COURSE) -> None:
    """init_database, then `course` holding every assignment in no course yet (hw4, on a new database)."""
    init_database(settings)
    with session_scope(make_session_factory(make_engine(settings))) as session:
        course_of_free_assignments(session, course, f"Tests: {course}")


@contextmanager
def own_database(settings_env: dict[str, str], data_dir: Path, prefix: str, **changes: str) -> Iterator[dict[str, str]]:
    """The session's KG_* variables on a fresh database (with the tests' course) and data dir of
    their own, changed by `changes`: for a test whose outcome other tests' rows would sway."""
    with fresh_database(prefix) as url:
        env = {**settings_env, "KG_DATABASE_URL": url, "KG_DATA_DIR": str(data_dir), **changes}
        init_with_course(Settings.from_variables(env))
        yield env


@pytest.fixture(scope="session")
def settings(settings_env: dict[str, str]) -> Settings:
    s = Settings.from_variables(settings_env)
    init_with_course(s)
    return s


@pytest.fixture(scope="session")
def sessions(settings: Settings) -> sessionmaker[Session]:
    return make_session_factory(make_engine(settings))


@pytest.fixture(scope="session")
def tokens(sessions: sessionmaker[Session]) -> dict[str, str]:
    with session_scope(sessions) as session:
        return {
            "alice": issue_token(session, get_or_create_user(session, "alice", Role.student), "test"),
            "bob": issue_token(session, get_or_create_user(session, "bob", Role.student), "test"),
            "staff": issue_token(session, get_or_create_user(session, "staff", Role.instructor), "test"),
        }


@pytest.fixture(scope="session")
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(settings: Settings, port: int | None = None) -> Iterator[str]:
    """The real app served by uvicorn in a thread on a loopback port (`port`, for settings that
    name the service's own address; else a free one): its base URL."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class WorkerProcess:
    """A real `celery worker` process on the test queue."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "grader.celery_app", "worker",
             "-Q", f"{self.env['KG_TASK_QUEUE']},{self.env['KG_SIMILARITY_QUEUE']}",
             "--concurrency", "1", "--loglevel", "info", "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
            cwd=PROJECT_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def kill(self) -> None:
        """SIGKILL the whole process group: the worker and its pool child die mid-task."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture(scope="session")
def worker(settings_env: dict[str, str], settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(settings_env, tmp_path_factory.mktemp("worker") / "worker.log")
    proc.start()
    yield proc
    proc.stop()


def wait_for_run(client: TestClient, run_id: int, token: str, timeout: float = 240,
                 until: Callable[[dict[str, Any]], bool] = lambda r: r["state"] in FINAL) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = client.get(f"/api/v1/runs/{run_id}", headers=auth(token)).json()
        if until(run):
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} did not reach the expected state in {timeout} s: {run}")
        time.sleep(0.5)


def new_student(sessions: sessionmaker[Session], prefix: str = "student") -> str:
    """A token of a student created now: nothing of theirs is in flight, so fair share sends
    their first upload to the broker at once (the shared ones may have runs waiting)."""
    with session_scope(sessions) as session:
        return issue_token(session, get_or_create_user(session, f"{prefix}-{uuid.uuid4().hex[:8]}", Role.student), "t")


@pytest.fixture(scope="session")
def kit_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the reference kit that tests may alter before zipping."""
    dest = tmp_path_factory.mktemp("kit") / "llmsys_hw4"
    shutil.copytree(load_rubric("hw4").starter_dir, dest, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    return dest


def make_zip(tree: Path, dest: Path, edits: dict[str, str] | None = None) -> Path:
    """Zip a copy of `tree` (with `edits`: relative path -> new text) the way a student would."""
    work = dest.parent / (dest.stem + "-tree")
    shutil.copytree(tree, work)
    for rel, text in (edits or {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:  # every file, as `zip -r` would
        for path in sorted(work.rglob("*")):
            if path.is_file():
                zf.write(path, f"{tree.name}/{path.relative_to(work).as_posix()}")
    return dest


def submit(client: TestClient, token: str, archive: Path) -> dict[str, Any]:
    with archive.open("rb") as fh:
        response = client.post("/api/v1/submissions", headers=auth(token), files={"file": (archive.name, fh)})
    assert response.status_code == 201, response.text
    return response.json()


def run_row(sessions: sessionmaker[Session], run_id: int) -> Run:
    with session_scope(sessions) as session:
        run = session.get(Run, run_id)
        assert run is not None
        session.expunge(run)
        return run
