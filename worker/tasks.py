"""The Celery task: a thin adapter from a message to RunExecutor.execute."""
from __future__ import annotations

import functools

from celery import Task

from grader.blobstore import BlobStore
from grader.db import make_engine, make_session_factory
from grader.settings import get_settings
from worker.celery_app import TASK_GRADE_RUN, celery
from worker.runs import Disposition, RunExecutor

RETRY_COUNTDOWN_S = 30


@functools.cache
def executor() -> RunExecutor:
    """One executor (and connection pool) per worker process, made after the fork."""
    settings = get_settings()
    return RunExecutor(settings, make_session_factory(make_engine(settings)), BlobStore(settings.blob_dir))


@celery.task(name=TASK_GRADE_RUN, bind=True, max_retries=None)
def grade_run(self: Task, run_id: int) -> str:
    # An infrastructure fault releases the run and retries; RunExecutor caps the attempts.
    disposition = executor().execute(run_id)
    if disposition is Disposition.retry:
        raise self.retry(countdown=RETRY_COUNTDOWN_S)
    return disposition.value
