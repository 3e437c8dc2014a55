"""The reconciler and a run's timing piece (issue 55), on PostgreSQL and the machine's Redis: a run
whose timing worker died goes back to `checked` (its verdicts kept, the attempt counted) and its
timing is sent again, ahead of the other timings; a checked run whose timing was never sent is sent."""
from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from grader.celery_app import make_celery
from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Role, Run, RunState, utcnow
from grader.runs.dispatch import held_runs
from grader.runs.reconcile import reconcile
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.service.conftest import own_database


def _run_in(settings: Settings, sessions: sessionmaker[Session], state: RunState, tag: str, **values: object) -> int:
    blob = BlobStore(settings.blob_dir).put_bytes(b"PK\x05\x06" + bytes(18) + tag.encode())
    with session_scope(sessions) as session:
        user = get_or_create_user(session, f"timed-{tag}", Role.student)
        _, run = record_submission(session, user, get_assignment(session, "hw4"), f"{tag}.zip", blob)
        run_id = run.id
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.id == run_id).values(state=state, **values))
    return run_id


def test_a_dead_timing_goes_back_to_checked_and_timings_are_sent(settings_env: dict[str, str], tmp_path: Path) -> None:
    # a database of its own: the reconciler sends whatever it finds unsent
    with own_database(settings_env, tmp_path / "kgdata", "kg_recon_timing",
                      KG_TASK_QUEUE=f"timing-{uuid.uuid4().hex[:8]}") as env:
        own = Settings.from_variables(env)
        _drill(own, make_session_factory(make_engine(own)))


def _drill(own: Settings, sessions: sessionmaker[Session]) -> None:
    long_ago = utcnow() - timedelta(seconds=own.heartbeat_timeout_s + 60)
    died = _run_in(own, sessions, RunState.timing, uuid.uuid4().hex[:6], claimed_by="gone", heartbeat_at=long_ago,
                   attempts=1, progress={"checked": [{"problem": "1.1"}]}, enqueued_at=long_ago)
    unsent = _run_in(own, sessions, RunState.checked, uuid.uuid4().hex[:6], attempts=1, enqueued_at=None)
    celery = make_celery(own)
    try:
        report = reconcile(own, sessions, celery)
        assert {died, unsent} <= set(report.resent), report
        with session_scope(sessions) as session:
            for run_id, attempts in ((died, 2), (unsent, 1)):
                run = session.get(Run, run_id)
                assert run is not None and run.state is RunState.checked and run.claimed_by is None
                assert run.attempts == attempts and run.enqueued_at is not None
            assert session.get(Run, died).progress == {"checked": [{"problem": "1.1"}]}  # the verdicts stay
        held = held_runs(celery, [own.task_queue])
        assert held is not None and {died, unsent} <= held  # time_run messages, in the run queue
    finally:
        with celery.connection_for_write() as conn:
            conn.default_channel.queue_purge(own.task_queue)
