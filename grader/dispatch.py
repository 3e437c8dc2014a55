"""Sending grading tasks to the broker, and noticing when that fails.

The database is the source of truth: a run that could not be sent stays `queued` with no
`enqueued_at`, and the reconciler sends it when the broker is back.
"""
from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.models import Run, utcnow
from worker.celery_app import TASK_GRADE_RUN

log = logging.getLogger(__name__)

# Fail fast when the broker is down: the upload is already safe, a client should not wait.
_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def send_run(celery: Celery, sessions: sessionmaker[Session], run_id: int, queue: str) -> bool:
    """Publish the grading task for `run_id`; True when the broker accepted it."""
    try:
        celery.send_task(
            TASK_GRADE_RUN, args=[run_id], queue=queue, retry=True, retry_policy=_PUBLISH_RETRY
        )
    except Exception as exc:  # kombu raises OperationalError and friends; any failure counts
        log.warning("broker unavailable, run %s stays queued: %s", run_id, exc)
        return False
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.id == run_id).values(enqueued_at=utcnow()))
    return True
