"""grader/runs/fairshare.py on PostgreSQL with a real Redis queue (no worker consumes it): one run
per student in flight, a student's burst does not push others back, the next run goes out
when one ends, concurrent uploads of one student cannot both pass, a down broker loses nothing."""
from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from grader.celery_app import make_celery
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Run, RunState, utcnow
from grader.runs.fairshare import Admission, admit, dispatchable, release_next
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.service.conftest import drop_queues, queued_messages


@dataclass
class Queue:
    settings: Settings
    sessions: sessionmaker[Session]
    name: str

    def upload(self, user: str) -> tuple[int, int]:
        """A new submission of `user` and its run (committed, never sent): (user id, run id)."""
        with session_scope(self.sessions) as session:
            owner = get_or_create_user(session, user, Role.student)
            blob = StoredBlob(uuid.uuid4().hex + uuid.uuid4().hex, 10)
            _, run = record_submission(session, owner, get_assignment(session, "hw4"), "hw.zip", blob)
            return owner.id, run.id

    def admit(self, run_id: int) -> bool:
        """True when the run reached the broker now."""
        return admit(make_celery(self.settings), self.sessions, run_id, self.name) is Admission.sent

    def sent(self) -> list[int]:
        """Run ids in the broker queue, in the order a worker would take them."""
        return [json.loads(base64.b64decode(b["body"]))[0][0] for b in queued_messages(self.name)]

    def finish(self, run_id: int) -> None:
        with session_scope(self.sessions) as session:
            session.execute(update(Run).where(Run.id == run_id).values(state=RunState.scored, finished_at=utcnow()))


@pytest.fixture
def queue(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[Queue]:
    name = f"kg-fair-{uuid.uuid4().hex[:8]}"
    yield Queue(settings.model_copy(update={"task_queue": name}), sessions, name)
    drop_queues(name)


def test_a_burst_holds_one_place_and_others_go_right_in(queue: Queue) -> None:
    tag = uuid.uuid4().hex[:6]
    heavy = [queue.upload(f"heavy-{tag}") for _ in range(20)]
    light = [queue.upload(f"light{i}-{tag}") for i in range(5)]
    admitted = [queue.admit(run) for _, run in heavy + light]
    assert admitted == [True] + [False] * 19 + [True] * 5
    assert queue.sent() == [heavy[0][1]] + [run for _, run in light]
    # The heavy student's first run ends: their next one, and only it, goes out.
    queue.finish(heavy[0][1])
    assert release_next(make_celery(queue.settings), queue.sessions, heavy[0][0], queue.name) == heavy[1][1]
    assert queue.sent()[-1] == heavy[1][1] and len(queue.sent()) == 7
    assert release_next(make_celery(queue.settings), queue.sessions, heavy[0][0], queue.name) is None


def test_dispatchable_lists_one_run_per_idle_student(queue: Queue) -> None:
    tag = uuid.uuid4().hex[:6]
    first = [queue.upload(f"idle-{tag}")[1] for _ in range(3)]
    other = queue.upload(f"idle2-{tag}")[1]
    with session_scope(queue.sessions) as session:
        listed = [r for r in dispatchable(session) if r in first + [other]]
    assert listed == [first[0], other]


def test_concurrent_uploads_of_one_student_send_one_run(queue: Queue) -> None:
    tag = uuid.uuid4().hex[:6]
    runs = [queue.upload(f"racer-{tag}")[1] for _ in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        admitted = list(pool.map(queue.admit, runs))
    # Exactly one run reaches the broker, the student's oldest, whichever thread sent it
    # (a thread reports `sent` only when the run it admitted is the one that went).
    assert queue.sent() == [runs[0]] and sum(admitted) <= 1


def test_broker_down_leaves_the_run_waiting(queue: Queue) -> None:
    offline = Queue(queue.settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"}), queue.sessions,
                    queue.name)
    _, run_id = offline.upload(f"offline-{uuid.uuid4().hex[:6]}")
    assert offline.admit(run_id) is False
    with session_scope(queue.sessions) as session:
        assert run_id in dispatchable(session), "the run must wait for the reconciler, not be lost"
    assert queue.admit(run_id) is True  # broker back
