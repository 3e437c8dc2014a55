"""An assignment's similarity report, computed in the background by a Celery worker.

Staff start a job (the similarity page): a `SimilarityJob` row in `queued`, and a message on
the similarity queue (`KG_SIMILARITY_QUEUE`, CPU work: never the GPU run queue). The worker
claims it (`queued` -> `running`), resolves the assignment's base (grader.similarity.base) and
the sources staff listed (grader.similarity.public: known solutions, common code),
records the files fingerprinted as it goes, and ends `done` once the new report is stored
(grader.similarity.store; the old one is replaced only then) or `failed` with the reason, the
previous report kept. The Celery task runs the computation in a child process of its own
(`python -m grader.similarity.jobs <job id>`): the pool's processes are daemonic and may not
fingerprint in a process pool of their own, and a computation that crashes or runs out of
memory then fails its job instead of the worker. One job per assignment at a time: starting
while one is queued or running returns that one. A job still queued or running past the task's
hard time limit (no worker took it, or its worker died) counts as failed when staff look again.
"""
from __future__ import annotations

import functools
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

from celery import Celery, shared_task
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.db import make_engine, make_session_factory, session_scope
from grader.models import Assignment, SimilarityJob, User, utcnow
from grader.runs.engine_config import pipeline_config
from grader.settings import Settings, get_settings
from grader.similarity.base import assignment_base
from grader.similarity.fetch import FetchRules
from grader.similarity.public import Entry, read_sources
from grader.similarity.store import compute_report, fingerprint_dir, report_path, save_report
from grader.storage.blobstore import BlobStore
from worker.rubric import load_rubric

TASK_SIMILARITY = "kernelgrade.similarity"
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
PROGRESS_EVERY_S = 0.5  # how often the files fingerprinted are written while they grow


@dataclass(frozen=True)
class JobView:
    """What the similarity page and its status endpoint show of a job."""

    id: int
    state: str
    files_done: int
    files_total: int
    base: str | None
    error: str | None

    @property
    def final(self) -> bool:
        return self.state in (DONE, FAILED)

    def as_json(self) -> dict[str, object]:
        return {"id": self.id, "state": self.state, "final": self.final, "files_done": self.files_done,
                "files_total": self.files_total, "base": self.base, "error": self.error}


def view(job: SimilarityJob) -> JobView:
    return JobView(job.id, job.state, job.files_done, job.files_total, job.base, job.error)


def latest_job(session: Session, assignment: Assignment, settings: Settings) -> SimilarityJob | None:
    """The assignment's newest job. One still `running` past the task's hard time limit is
    failed here (its worker is gone: a live task would have been stopped by then), and so is
    one still `queued` that long (no worker consumes the similarity queue, or its message was
    lost), so that staff can start another."""
    job = session.scalar(select(SimilarityJob).where(SimilarityJob.assignment_id == assignment.id)
                         .order_by(SimilarityJob.id.desc()).limit(1))
    limit = timedelta(seconds=settings.task_time_limit_s)
    if job is None or job.state not in (QUEUED, RUNNING):
        return job
    since = job.started_at if job.state == RUNNING else job.created_at
    if since is not None and utcnow() - since > limit:
        job.error = (f"the worker stopped: no result {settings.task_time_limit_s} s after it started"
                     if job.state == RUNNING else
                     f"no worker took it in {settings.task_time_limit_s} s: "
                     f"is one consuming {settings.similarity_queue}?")
        job.state, job.finished_at = FAILED, utcnow()
    return job


def start_job(session: Session, celery_app: Celery, settings: Settings, assignment: Assignment,
              user: User) -> SimilarityJob:
    """A new job sent to the similarity queue, or the assignment's job still queued or running.
    Committed before it is sent, so the worker finds the row; a broker that refuses the message
    fails the job with the reason."""
    current = latest_job(session, assignment, settings)
    if current is not None and current.state in (QUEUED, RUNNING):
        return current
    job = SimilarityJob(assignment_id=assignment.id, requested_by=user.id, state=QUEUED)
    session.add(job)
    session.commit()
    try:
        celery_app.send_task(TASK_SIMILARITY, args=[job.id], queue=settings.similarity_queue)
    except Exception as exc:  # the broker is down or refuses: the job must not stay queued forever
        job.state, job.finished_at, job.error = FAILED, utcnow(), f"could not queue the job: {exc}"
        session.commit()
    return job


def run_job(settings: Settings, sessions: sessionmaker[Session], blobs: BlobStore, job_id: int) -> str:
    """Claims and computes job `job_id`; its final state (or why it was not run)."""
    with session_scope(sessions) as session:
        claimed = session.execute(update(SimilarityJob).where(SimilarityJob.id == job_id, SimilarityJob.state == QUEUED)
                                  .values(state=RUNNING, started_at=utcnow())).rowcount  # type: ignore[attr-defined]
        job = session.get(SimilarityJob, job_id)
        if not claimed or job is None:
            return f"not run: job {job_id} is {job.state if job else 'gone'}"
        slug, setting, listed = job_assignment(session, job)
    try:
        rubric = load_rubric(slug, search=settings.rubric_dirs)
        limits = pipeline_config(settings, rubric).limits
        base = assignment_base(settings.data_dir, rubric, limits, setting, FetchRules.of(settings))
        _record(sessions, job_id, base=base.label[:512])  # its column's size
        public = read_sources(settings.data_dir, rubric, limits, listed, FetchRules.of(settings))
        with session_scope(sessions) as session:
            report, _sources = compute_report(session, blobs, rubric, limits, base, fingerprint_dir(settings.data_dir),
                                              _ProgressWriter(sessions, job_id), public)
        save_report(report, base.sources, report_path(settings.data_dir, slug))
    except Exception as exc:  # any failure ends the job with its reason; the previous report stays
        _record(sessions, job_id, state=FAILED, finished_at=utcnow(), error=f"{type(exc).__name__}: {exc}")
        return FAILED
    _record(sessions, job_id, state=DONE, finished_at=utcnow())
    return DONE


def job_assignment(session: Session, job: SimilarityJob) -> tuple[str, str | None, list[Entry]]:
    """(slug, similarity base setting, listed sources) of the job's assignment."""
    assignment = session.get(Assignment, job.assignment_id)
    if assignment is None:
        raise LookupError(f"job {job.id}: its assignment is gone")
    return assignment.slug, assignment.similarity_base, list(assignment.similarity_sources or [])


def _record(sessions: sessionmaker[Session], job_id: int, **values: object) -> None:
    with session_scope(sessions) as session:
        session.execute(update(SimilarityJob).where(SimilarityJob.id == job_id).values(**values))


class _ProgressWriter:
    """Writes the job's (files fingerprinted, files to fingerprint) at most every
    PROGRESS_EVERY_S, and always the last step."""

    def __init__(self, sessions: sessionmaker[Session], job_id: int) -> None:
        self.sessions, self.job_id, self.last = sessions, job_id, float("-inf")

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            _record(self.sessions, self.job_id, files_done=done, files_total=total)


@functools.cache
def _worker_state() -> tuple[Settings, sessionmaker[Session], BlobStore]:
    """One connection pool per worker process, made after the fork."""
    settings = get_settings()
    return settings, make_session_factory(make_engine(settings)), BlobStore(settings.blob_dir)


def fail_unfinished(sessions: sessionmaker[Session], job_id: int, reason: str) -> None:
    """Job `job_id` failed with `reason`, unless it already ended."""
    with session_scope(sessions) as session:
        session.execute(update(SimilarityJob)
                        .where(SimilarityJob.id == job_id, SimilarityJob.state.in_((QUEUED, RUNNING)))
                        .values(state=FAILED, finished_at=utcnow(), error=reason))


@shared_task(name=TASK_SIMILARITY)
def similarity_task(job_id: int) -> str:
    settings, sessions, _blobs = _worker_state()
    limit = settings.task_soft_time_limit_s
    try:
        done = subprocess.run([sys.executable, "-m", "grader.similarity.jobs", str(job_id)], timeout=limit)
    except Exception as exc:  # our timeout or Celery's soft limit: subprocess.run has killed the child
        fail_unfinished(sessions, job_id, f"the computation was stopped after {limit} s ({type(exc).__name__})")
        return FAILED
    if done.returncode != 0:
        fail_unfinished(sessions, job_id, f"the computation ended with exit status {done.returncode}")
    return f"job {job_id}: exit status {done.returncode}"


if __name__ == "__main__":
    print(run_job(*_worker_state(), int(sys.argv[1])))
