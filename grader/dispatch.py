"""Sending grading tasks to the broker, and noticing when that fails.

The database is the source of truth: a run that could not be sent stays `queued` with no
`enqueued_at`, and the reconciler sends it when the broker is back.

When the app routes builds to a CPU queue (KG_BUILD_QUEUE), a run is sent as a chain:
`prebuild` on the build queue, then the grading task on `queue`. The prebuild never fails the
chain (worker.tasks.prebuild), so the grading task is always sent on once it ran.
"""
from __future__ import annotations

import logging

from celery import Celery
from celery.canvas import Signature, chain
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.models import Run, utcnow
from worker.celery_app import TASK_GRADE_RUN, TASK_PREBUILD, build_queue_of

log = logging.getLogger(__name__)

# Fail fast when the broker is down: the upload is already safe, a client should not wait.
_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def run_signature(celery: Celery, run_id: int, queue: str) -> Signature:
    """What to publish for `run_id`: the grading task on `queue`, after a prebuild when the app
    routes builds to a build queue."""
    grade = celery.signature(TASK_GRADE_RUN, args=[run_id], queue=queue, immutable=True)
    build_queue = build_queue_of(celery)
    if build_queue is None:
        return grade
    return chain(celery.signature(TASK_PREBUILD, args=[run_id], queue=build_queue, immutable=True), grade)


def send_run(celery: Celery, sessions: sessionmaker[Session], run_id: int, queue: str) -> bool:
    """Publish the grading task for `run_id`; True when the broker accepted it."""
    try:
        run_signature(celery, run_id, queue).apply_async(retry=True, retry_policy=_PUBLISH_RETRY)
    except Exception as exc:  # kombu raises OperationalError and friends; any failure counts
        log.warning("broker unavailable, run %s stays queued: %s", run_id, exc)
        return False
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.id == run_id).values(enqueued_at=utcnow()))
    return True
