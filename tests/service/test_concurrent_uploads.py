"""Identical uploads sent at the same instant make one submission, on PostgreSQL (a row lock on
the student) and on SQLite (the embedded default, which has no row locks: the upload takes the
database's write lock before it looks for the one it repeats). Real concurrent HTTP requests to
the real app served by uvicorn; the SQLite app has its own data folder and embedded broker."""
from __future__ import annotations

import io
import threading
import uuid
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Role, Submission, User
from grader.settings import Settings
from tests.service.conftest import drop_queues, init_with_course, served

SENDERS = 6  # copies of one upload sent at once
ROUNDS = 4  # each round a new zip: a race lost once is a duplicate


@pytest.fixture(scope="module")
def postgres_app(settings: Settings) -> Iterator[tuple[str, Settings]]:
    own = settings.model_copy(update={"task_queue": f"kg-concurrent-{uuid.uuid4().hex[:8]}"})
    with served(own) as url:
        yield url, own
    drop_queues(own.task_queue)


@pytest.fixture(scope="module")
def sqlite_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    """The embedded default: SQLite and the SQLite broker in a data folder of its own."""
    own = Settings.from_variables({"KG_DATA_DIR": str(tmp_path_factory.mktemp("sqlite-app"))})
    assert own.resolved_database_url.startswith("sqlite")
    init_with_course(own)
    with served(own) as url:
        yield url, own


def _student(sessions: sessionmaker[Session]) -> tuple[str, str]:
    name = f"race-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        return name, issue_token(session, get_or_create_user(session, name, Role.student), "t")


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("llmsys_hw4/src/softmax_kernel.cu", f"// {uuid.uuid4().hex}\n")
    return buf.getvalue()


def _send_at_once(url: str, token: str, data: bytes) -> list[httpx.Response]:
    start = threading.Barrier(SENDERS)

    def send(_: int) -> httpx.Response:
        with httpx.Client(base_url=url, timeout=60) as client:
            start.wait()
            return client.post("/api/v1/submissions", headers={"Authorization": f"Bearer {token}"},
                               files={"file": ("hw.zip", data, "application/zip")})

    with ThreadPoolExecutor(max_workers=SENDERS) as pool:
        return list(pool.map(send, range(SENDERS)))


def _submissions(sessions: sessionmaker[Session], name: str) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count(Submission.id)).join(User, Submission.user_id == User.id)
                                  .where(User.username == name)) or 0)


@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_identical_uploads_sent_at_once_make_one_submission(database: str, request: pytest.FixtureRequest) -> None:
    url, settings = request.getfixturevalue(f"{'postgres' if database == 'postgresql' else 'sqlite'}_app")
    assert settings.resolved_database_url.startswith(database)
    sessions = make_session_factory(make_engine(settings))
    name, token = _student(sessions)
    for round_ in range(1, ROUNDS + 1):
        answers = _send_at_once(url, token, _zip())
        assert sorted(a.status_code for a in answers) == [200] * (SENDERS - 1) + [201], [a.text for a in answers]
        assert len({a.json()["submission_id"] for a in answers}) == 1
        assert _submissions(sessions, name) == round_
