"""Celery tasks: thin adapters from a message to the worker's code.

- grade_run (run queue, GPU workers): RunExecutor.execute claims, grades and records the run;
  with the split (KG_TIMING_SPLIT) its checks piece, and a run left `checked` has its timing sent.
- time_run (run queue, behind every check: grader.celery_app's PRIORITY_TIMING):
  RunExecutor.execute_timing times and scores a `checked` run.
- prebuild (build queue, CPU workers): compiles the run's kernels so that they land in the
  shared build cache (`KG_DATA_DIR/build-cache`, keyed by the hash of sources, headers, nvcc
  version and flags); the grading task that follows it in the chain then finds them there
  instead of running nvcc on a GPU worker. It records nothing on the run: the GPU worker's
  pipeline still unpacks, stages and (from the cache) builds, so its result is the same with or
  without the prebuild, and a prebuild that could not help costs only time.
"""
from __future__ import annotations

import functools
import logging
import shutil
import uuid

from celery import Task, shared_task

from grader.celery_app import TASK_GRADE_RUN, TASK_PREBUILD, TASK_TIME_RUN
from grader.datadir import private_dir
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Run, RunState
from grader.runs.dispatch import send_run, send_timing
from grader.runs.engine_config import pipeline_config
from grader.runs.fairshare import release_after
from grader.runs.lifecycle import Disposition, RunExecutor, worker_identity
from grader.runs.worker_start import sandbox_shortfall, stop_taking_jobs
from grader.runs.worker_stop import stops_on_sigterm
from grader.settings import get_settings
from grader.storage.blobstore import BlobStore
from worker.build import ToolchainFault
from worker.pipeline import grade_submission
from worker.rubric import load_rubric

log = logging.getLogger(__name__)
RETRY_COUNTDOWN_S = 30


@functools.cache
def executor() -> RunExecutor:
    """One executor (and connection pool) per worker process, made after the fork."""
    settings = get_settings()
    return RunExecutor(settings, make_session_factory(make_engine(settings)), BlobStore(settings.blob_dir),
                       on_toolchain_fault=stop_taking_jobs, reduced_isolation=sandbox_shortfall(settings))


@shared_task(name=TASK_GRADE_RUN, bind=True, max_retries=None)
def grade_run(self: Task, run_id: int, claim: str | None = None) -> str:
    # An infrastructure fault releases the run and retries; RunExecutor caps the attempts. A
    # database error at the claim, or one that kept the executor from ending its claim, retries
    # within seconds with the same claim identity (`claim`), so the retry takes back a claim that
    # was saved (no attempt used): with acks_late, a task that raised would be acknowledged and
    # its message gone, and a saved claim would wait for the reconciler. The return value is what
    # Celery logs.
    ex = executor()
    claim = claim or worker_identity()
    with stops_on_sigterm():
        disposition = _retried_unless_ended(self, ex, run_id, claim, ex.execute(run_id, claim))
    if disposition is Disposition.stopped:  # given back: at the front of its queue, for another worker
        send_run(self.app, ex.sessions, run_id, ex.settings.task_queue, resent=True)  # not sent: the reconciler sends it
    if disposition is Disposition.done:
        if ex.timing_due(run_id):
            send_timing(self.app, ex.sessions, run_id, ex.settings.task_queue)  # not sent: the reconciler sends it
        release_after(self.app, ex.sessions, run_id, ex.settings.task_queue)  # fair share: the student's next run
    return disposition.value


@shared_task(name=TASK_TIME_RUN, bind=True, max_retries=None)
def time_run(self: Task, run_id: int, claim: str | None = None) -> str:
    """The timing piece of a `checked` run; retried as grade_run is."""
    ex = executor()
    claim = claim or worker_identity()
    with stops_on_sigterm():
        disposition = _retried_unless_ended(self, ex, run_id, claim, ex.execute_timing(run_id, claim))
    if disposition is Disposition.stopped:
        send_timing(self.app, ex.sessions, run_id, ex.settings.task_queue, first=True)
    return disposition.value


def _retried_unless_ended(task: Task, ex: RunExecutor, run_id: int, claim: str, disposition: Disposition) -> Disposition:
    """`disposition`, unless it asks for a retry: then the task is retried (Celery's Retry raised)."""
    if disposition is Disposition.retry:
        raise task.retry(countdown=RETRY_COUNTDOWN_S)
    if disposition is Disposition.unclaimed:
        log.warning("run %s: the database failed around the claim; retrying in %s s with the same claim", run_id,
                    ex.settings.claim_retry_after_s)
        raise task.retry(kwargs={"claim": claim}, countdown=ex.settings.claim_retry_after_s)
    return disposition


@shared_task(name=TASK_PREBUILD)
def prebuild(run_id: int) -> str:
    """Fill the build cache for a queued run. Never raises: the chain must go on to grading."""
    ex = executor()
    try:
        with session_scope(ex.sessions) as session:
            run = session.get(Run, run_id)
            if run is None or run.state is not RunState.queued:
                return "skipped"
            sha256, slug = run.submission.sha256, run.submission.assignment.slug
        rubric = load_rubric(slug, search=ex.settings.rubric_dirs)
        job_dir = private_dir(ex.settings.jobs_dir / f"prebuild-{run_id}-{uuid.uuid4().hex[:8]}")
        try:
            outcome = grade_submission(ex.blobs.path(sha256), rubric, job_dir, pipeline_config(ex.settings, rubric))
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
    except ToolchainFault as exc:  # a builder that cannot build stops taking jobs, as a GPU worker does
        log.exception("prebuild of run %s met a toolchain fault; the GPU worker will build it", run_id)
        stop_taking_jobs(str(exc))
        return "error"
    except Exception:
        log.exception("prebuild of run %s failed; the GPU worker will build it", run_id)
        return "error"
    log.info("prebuild of run %s: %s", run_id, outcome.state.value)
    return outcome.state.value
