"""Run bookkeeping around the pipeline: claim, heartbeat, record the outcome (then e-mail it: grader.notify).

A run is graded by at most one live worker. The claim is one atomic UPDATE that succeeds
only for a queued run or for an active run whose heartbeat has gone stale (its worker died).
A redelivered or duplicated task therefore never grades twice, and a worker that lost its
claim cannot overwrite the result of the one that took over (every write is fenced on
`claimed_by`).

A database error never strands a claim: the claim and the reads it needs are one transaction;
progress notes are best-effort (like the heartbeat); releasing the run or recording its
outcome is tried again for a few seconds (a finished grade is not thrown away for a blip); any
other database error, or one that outlasts those tries, ends the task with `unclaimed`, and the
task is retried within seconds carrying its claim's identity, which `claim_run` lets it take
back as the same attempt. Before, a claim saved just before the database failed was held by a
task that had already ended (acknowledged), until its heartbeat went stale and the reconciler
requeued it: about 90 s.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import TypeVar

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from grader.datadir import private_dir
from grader.db import session_scope
from grader.models import FINAL_STATES, REDUCED_ISOLATION, ErrorClass, ProblemResult, Run, RunState, utcnow
from grader.notify import notify_run_ended
from grader.runs.engine_config import gpu_stage_for, pipeline_config
from grader.runs.progress import ProgressNotes, checked_progress
from grader.runs.reuse import reuse_for
from grader.runs.timing_piece import checked_measurements, claim_timing, passed_over
from grader.runs.worker_stop import WorkerStopping, stop_asked
from grader.service import calibrated_targets_for
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from worker.build import ToolchainFault
from worker.measurements import ProblemMeasurement
from worker.pipeline import Outcome, grade_submission, not_run_problems, time_submission
from worker.rubric import Rubric, load_rubric
from worker.states import Piece
from worker.telemetry import gpu_snapshot

log = logging.getLogger(__name__)
# Waits between tries of a write that ends a claim (release, outcome) on a database error: 15 s
# in all, well inside the heartbeat timeout.
DB_RETRY_DELAYS_S = (1.0, 2.0, 4.0, 8.0)
# The database could not be reached or answered (down, restarting, connection cut, pool empty,
# SQLite locked): worth trying again soon. Any other error of a statement is a bug, and trying it
# again would loop: it stays an infrastructure fault that uses an attempt.
DATABASE_DOWN = (OperationalError, InterfaceError, PoolTimeout)
T = TypeVar("T")


class Disposition(str, Enum):
    done = "done"  # outcome recorded
    discarded = "discarded"  # graded, but the claim was taken over meanwhile: nothing recorded
    skipped = "skipped"  # someone else holds it, or it is already final
    retry = "retry"  # infrastructure fault: released back to the queue
    # The database failed during the claim (nothing changed, or the claim is this task's to take
    # back) or while ending it: retry soon with the same claim identity.
    unclaimed = "unclaimed"
    # SIGTERM reached the grading process (Slurm ended the job): given back, for the task to send again
    stopped = "stopped"


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def claim_run(session: Session, run_id: int, me: str, stale_before: datetime) -> bool:
    """Claim `run_id` for `me`: a queued run, an active one whose heartbeat is stale, or one that
    `me` holds already (a task retried after a database error takes its own claim back, and
    that is the same attempt, not another)."""
    now = utcnow()
    mine = Run.claimed_by == me
    result = session.execute(
        update(Run)
        .where(
            Run.id == run_id,
            or_(
                Run.state == RunState.queued,
                and_(
                    Run.state.in_((RunState.building, RunState.running)),
                    or_(mine, Run.heartbeat_at.is_(None), Run.heartbeat_at < stale_before),
                ),
            ),
        )
        .values(
            state=RunState.building,
            claimed_by=me,
            heartbeat_at=now,
            attempts=case((mine, Run.attempts), else_=Run.attempts + 1),
            started_at=func.coalesce(Run.started_at, now),
            worker_host=socket.gethostname(),
            error_class=None,
            message=None,
            progress=None,
        )
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


class Heartbeat:
    """Refreshes the claim every `interval` seconds from a background thread."""

    def __init__(self, sessions: sessionmaker[Session], run_id: int, me: str, interval: float) -> None:
        self._sessions, self._run_id, self._me, self._interval = sessions, run_id, me, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run_id}", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                with session_scope(self._sessions) as session:
                    session.execute(
                        update(Run)
                        .where(Run.id == self._run_id, Run.claimed_by == self._me)
                        .values(heartbeat_at=utcnow())
                    )
            except Exception:  # the database may blip; the next beat tries again
                log.exception("heartbeat for run %s failed", self._run_id)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)


@dataclass(frozen=True)
class _TimingInput:
    """What a timing piece reads with its claim: its checks' measurements, and why its timing is
    passed over (a newer upload counts), if it is."""

    checked: list[ProblemMeasurement]
    passed_over: str | None


@dataclass
class RunExecutor:
    settings: Settings
    sessions: sessionmaker[Session]
    blobs: BlobStore
    # Told (why) when a build met a toolchain fault, after the run is released or failed as an
    # infrastructure error: the Celery task stops the worker taking jobs (grader.runs.worker_start).
    on_toolchain_fault: Callable[[str], None] = field(default=lambda _why: None)
    # What this worker's sandbox lacks, where reduced isolation was asked for (worker_start's
    # canary): recorded on every run it records, for staff to see.
    reduced_isolation: tuple[str, ...] = ()

    def _rubric(self, slug: str) -> Rubric:
        """The run's rubric, searched along the settings' rubric_dirs after rubrics/ (a course's
        own assignment is found by a worker started with KG_RUBRIC_DIRS)."""
        return load_rubric(slug, search=self.settings.rubric_dirs)

    def execute(self, run_id: int, me: str | None = None) -> Disposition:
        """Claim, grade and record `run_id` as `me` (a new identity by default; a task retried
        after `unclaimed` passes the one it had, to take its own claim back). A GPU worker with
        the split (KG_TIMING_SPLIT) grades its checks piece: the run ends `checked` and
        `timing_due` says so, unless nothing is left to time."""
        return self._execute(run_id, me or worker_identity(), Piece.whole)

    def execute_timing(self, run_id: int, me: str | None = None) -> Disposition:
        """Claim the timing piece of the `checked` run `run_id`, time what its checks left
        (grader.runs.timing_piece: or pass it over when a newer upload counts) and record the score."""
        return self._execute(run_id, me or worker_identity(), Piece.timing)

    def timing_due(self, run_id: int) -> bool:
        """Whether `run_id` waits for its timing piece (its checks piece was just recorded)."""
        with session_scope(self.sessions) as session:
            return session.scalar(select(Run.state).where(Run.id == run_id)) is RunState.checked

    def _execute(self, run_id: int, me: str, piece: Piece) -> Disposition:
        """Claim, grade and record; on a stop (grader.runs.worker_stop: SIGTERM to this process,
        wherever it came) the run is given back instead, its attempt not counted: `stopped`."""
        try:
            return self._claim_and_grade(run_id, me, piece)
        except WorkerStopping:
            log.warning("run %s: this worker is being stopped (SIGTERM); the run goes back to the queue", run_id)
            _retrying_db(f"run {run_id}: give back", lambda: self._release(run_id, me, piece, counted=False))
            return Disposition.stopped

    def _claim_and_grade(self, run_id: int, me: str, piece: Piece) -> Disposition:
        stale_before = utcnow() - timedelta(seconds=self.settings.heartbeat_timeout_s)
        claim = claim_timing if piece is Piece.timing else claim_run
        try:
            with session_scope(self.sessions) as session:  # the claim and what it needs: all or nothing
                claimed = claim(session, run_id, me, stale_before)
                if claimed:
                    run = session.get(Run, run_id)
                    assert run is not None
                    attempts, sha256 = run.attempts, run.submission.sha256
                    slug = run.submission.assignment.slug
                    timing = _TimingInput(checked_measurements(run), passed_over(session, run)) \
                        if piece is Piece.timing else None
        except SQLAlchemyError:
            # Nothing was claimed, or the commit's answer was lost after it was saved: the task
            # retries with `me`, which takes such a claim back.
            log.exception("run %s: the database failed during the claim", run_id)
            return Disposition.unclaimed
        if not claimed:
            log.info("run %s: not claimable (final, or held by a live worker); skipping", run_id)
            return Disposition.skipped
        if attempts > self.settings.max_attempts:
            return self._finish(run_id, me, _infra_failure(self._rubric(slug), f"grading was interrupted {attempts - 1} times"))

        job_dir = self.settings.jobs_dir / f"run-{run_id}-attempt-{attempts}{'-timing' if timing else ''}"
        try:
            with Heartbeat(self.sessions, run_id, me, self.settings.heartbeat_interval_s):
                outcome = self._grade(run_id, me, sha256, slug, job_dir, timing)
        except DATABASE_DOWN:  # e.g. reading the calibrated targets: nothing graded yet; keep the claim
            log.exception("run %s: the database failed while grading; the task retries and takes its claim back", run_id)
            return Disposition.unclaimed
        except Exception as exc:
            log.exception("run %s: infrastructure fault", run_id)
            if attempts >= self.settings.max_attempts:
                # Only the kind of fault reaches the student: its text may name worker paths
                # (logged above in full for staff).
                kind = "the grading machine's CUDA toolchain failed" if isinstance(exc, ToolchainFault) else type(exc).__name__
                disposition = self._finish(run_id, me, _infra_failure(self._rubric(slug), f"{kind}; details in the worker log"))
            else:
                disposition = _retrying_db(f"run {run_id}: release",
                                           lambda: self._release(run_id, me, piece)) or Disposition.unclaimed
            if isinstance(exc, ToolchainFault):
                self.on_toolchain_fault(str(exc))
            return disposition
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        return self._finish(run_id, me, outcome)

    def _grade(self, run_id: int, me: str, sha256: str, slug: str, job_dir: Path,
               timing: _TimingInput | None) -> Outcome:
        archive = self.blobs.path(sha256)
        if not archive.is_file():
            raise FileNotFoundError(f"blob {sha256} is missing from the blob store")
        rubric = self._rubric(slug)
        shutil.rmtree(job_dir, ignore_errors=True)
        private_dir(job_dir)  # jobs/ and the job's folder 0700 (the sandbox gets its own folders: worker.sandbox)

        def record(**values: object) -> None:
            """A progress note: best-effort, like the heartbeat (a database blip must not end the grade)."""
            try:
                with session_scope(self.sessions) as session:
                    session.execute(update(Run).where(Run.id == run_id, Run.claimed_by == me).values(**values))
            except SQLAlchemyError:
                log.warning("run %s: progress not recorded (database error); grading goes on", run_id, exc_info=True)

        def write(progress: dict[str, object], running: bool) -> None:  # a timing piece stays `timing`
            record(progress=progress, **({"state": RunState.running} if running and timing is None else {}))

        notes = ProgressNotes(rubric, write, lambda line: log.info("run %s: %s", run_id, line))
        piece = Piece.timing if timing else Piece.checks if self.settings.timing_split else Piece.whole
        gpu_stage = gpu_stage_for(self.settings, rubric, notes.for_stage(), piece)
        if gpu_stage is None and piece is Piece.checks:  # no GPU here: nothing to split
            piece = Piece.whole
        config = pipeline_config(self.settings, rubric, piece)
        targets, reuse = None, None
        if gpu_stage is not None:
            gpu_model = gpu_snapshot(self.settings.gpu_index).get("name")
            with session_scope(self.sessions) as session:
                targets = calibrated_targets_for(session, slug, gpu_model)
            if timing is None:  # only a run's first piece may take an earlier run's measurements
                reuse = reuse_for(self.settings, self.sessions, run_id, rubric, gpu_model, targets)
        if timing is None:
            return grade_submission(archive, rubric, job_dir, config, notes.stage, gpu_stage, targets, piece, reuse)
        if gpu_stage is None:
            raise RuntimeError("a timing piece reached a worker without a GPU stage")
        return time_submission(archive, rubric, job_dir, config, gpu_stage, timing.checked, targets, notes.stage,
                               not_timed=timing.passed_over)

    def _release(self, run_id: int, me: str, piece: Piece, counted: bool = True) -> Disposition:
        """Give a run back to the queue after an infrastructure fault (no result recorded); a
        timing piece's back to `checked`, its checks' verdicts kept. Not `counted` (a stop asked
        from outside): the claim's attempt is given back too."""
        # a timing's claim of a checked run counts no attempt (its checks' did): its release does
        back = ({"state": RunState.checked, "attempts": Run.attempts + (1 if counted else 0)} if piece is Piece.timing
                else {"state": RunState.queued, "progress": None, "attempts": Run.attempts - (0 if counted else 1)})
        with session_scope(self.sessions) as session:
            session.execute(
                update(Run)
                .where(Run.id == run_id, Run.claimed_by == me)
                .values(claimed_by=None, heartbeat_at=None, enqueued_at=None, **back)
            )
        return Disposition.retry

    def _finish(self, run_id: int, me: str, outcome: Outcome) -> Disposition:
        """Record `outcome` if this worker still holds the claim: `done`, else `discarded`;
        `unclaimed` when the database stayed away (the task retries and grades again). Not after a
        stop: the grade's children may have been killed under it (WorkerStopping, caught by _execute)."""
        if stop_asked():
            raise WorkerStopping("this worker was stopped while grading: the outcome is not recorded")
        recorded = _retrying_db(f"run {run_id}: record the outcome", lambda: self._record(run_id, me, outcome))
        if recorded is Disposition.done and outcome.state in FINAL_STATES:
            notify_run_ended(self.settings, self.sessions, run_id)  # after the commit; never raises
        return recorded or Disposition.unclaimed

    def _record(self, run_id: int, me: str, outcome: Outcome) -> Disposition:
        with session_scope(self.sessions) as session:
            run = session.get(Run, run_id, with_for_update=True)
            if run is None or run.claimed_by != me:
                log.warning("run %s: result discarded (%s): the claim was lost, another attempt owns the run",
                            run_id, outcome.state.value)
                return Disposition.discarded
            timed = run.state is RunState.timing  # the second piece: the first's record stays beside it
            run.state = outcome.state
            run.error_class = outcome.error_class
            run.message = outcome.message
            run.score = outcome.score
            stages = {name: rec.as_dict() for name, rec in outcome.stages.items()}
            run.stages = {**(run.stages or {}), **stages} if timed else stages
            toolchain = {**(run.toolchain or {}), **outcome.toolchain} if timed else outcome.toolchain
            run.toolchain = ({**toolchain, REDUCED_ISOLATION: list(self.reduced_isolation)}
                             if self.reduced_isolation else toolchain)
            run.report = outcome.report
            if not timed:  # a timing piece keeps the key its checks piece recorded
                run.measure_key, run.reused_from = outcome.measure_key, outcome.reused_from
            run.claimed_by = None
            run.finished_at = None if outcome.state is RunState.checked else utcnow()
            run.enqueued_at = None if outcome.state is RunState.checked else run.enqueued_at  # its timing is sent next
            run.progress = (checked_progress(self._rubric(run.submission.assignment.slug), outcome)
                            if outcome.state is RunState.checked else None)
            run.results.clear()
            run.results.extend(
                ProblemResult(
                    problem_id=p.problem_id,
                    title=p.title,
                    status=p.status,
                    points=p.points,
                    max_points=p.max_points,
                    message=p.message,
                    details=p.details or None,
                )
                for p in outcome.problems
            )
        return Disposition.done


def _retrying_db(what: str, write: Callable[[], T]) -> T | None:
    """`write()` (one transaction), tried again after each of DB_RETRY_DELAYS_S while the database
    fails; None when it never succeeded."""
    for delay in (*DB_RETRY_DELAYS_S, None):
        try:
            return write()
        except DATABASE_DOWN:
            if delay is None:
                log.exception("%s: the database failed %d times; the task retries", what, len(DB_RETRY_DELAYS_S) + 1)
                return None
            log.warning("%s: database error; trying again in %g s", what, delay)
            time.sleep(delay)
    return None


def _infra_failure(rubric: Rubric, detail: str) -> Outcome:
    return Outcome(
        state=RunState.failed,
        error_class=ErrorClass.infra_error,
        message=(
            "The grading infrastructure failed; this is not a problem with your code and no "
            f"score was recorded. Your upload is kept and staff can re-grade it. ({detail})"
        ),
        problems=not_run_problems(rubric, "not graded: infrastructure error"),
    )
