"""The service's side of a run's timing piece (worker.pieces): the claim of a `checked` run, what
its checks left to time, and time spent only on what counts.

A run's timing waits behind every check in its queue, so at a deadline a student may upload again
before their earlier upload is timed. Under the "latest" score policy that earlier upload no
longer counts: its timing is passed over (its correctness verdicts stay, its page says why) unless
it is chosen to count, which sends its timing again ahead of the other timings. Under "best"
every upload may count, so every one is timed.
"""
from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import and_, case, or_, select, update
from sqlalchemy.orm import Session

from grader.course.grade_reads import counted_pins
from grader.models import Run, RunState, Submission, utcnow
from worker.measurements import ProblemMeasurement
from worker.pieces import PASSED_OVER, mark_timing_pending


def claim_timing(session: Session, run_id: int, me: str, stale_before: datetime) -> bool:
    """Claim the timing of `run_id` for `me`: a `checked` run, or one in `timing` whose worker
    is gone (stale heartbeat) or is `me` (a retry taking its claim back). A first timing is part
    of the run's attempt (its checks' claim counted it); only a timing taken over counts another."""
    mine = Run.claimed_by == me
    result = session.execute(
        update(Run)
        .where(Run.id == run_id,
               or_(Run.state == RunState.checked,
                   and_(Run.state == RunState.timing,
                        or_(mine, Run.heartbeat_at.is_(None), Run.heartbeat_at < stale_before))))
        .values(state=RunState.timing, claimed_by=me, heartbeat_at=utcnow(),
                attempts=case((or_(mine, Run.state == RunState.checked), Run.attempts), else_=Run.attempts + 1),
                worker_host=socket.gethostname())
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def passed_over(session: Session, run: Run) -> str | None:
    """Why `run`'s timing is not worth the GPU now (the student uploaded again and the newer
    upload counts instead), or None."""
    sub = run.submission
    assignment = sub.assignment
    if assignment.score_policy != "latest":
        return None
    pin = counted_pins(session, assignment.id, sub.user_id).get(sub.user_id)
    if pin is not None and pin.run_id == run.id:
        return None
    newer = session.scalar(select(Submission.id).where(
        Submission.user_id == sub.user_id, Submission.assignment_id == assignment.id,
        Submission.id > sub.id).order_by(Submission.id).limit(1))
    if newer is None:
        return None
    return (f"not timed: you uploaded again (submission {newer}) before this upload's timing began, and only "
            "the upload that counts is timed; if this one is chosen to count, it is timed then")


def checked_measurements(run: Run) -> list[ProblemMeasurement]:
    """What the run's checks piece measured (its problem rows), with the problems whose timing
    was passed over pending again."""
    again = set((run.toolchain or {}).get(PASSED_OVER) or ())
    measurements = []
    for result in run.results:
        data = (result.details or {}).get("measurement")
        if data is None:
            continue
        m = ProblemMeasurement.from_dict(data)
        if m.problem_id in again:
            mark_timing_pending(m)
        measurements.append(m)
    return measurements


def reopen_for_timing(session: Session, run: Run) -> bool:
    """A scored run whose timing was passed over goes back to `checked` (its correctness stays,
    its score waits for the timing); True when it did. The caller sends its timing first."""
    if run.state is not RunState.scored or not (run.toolchain or {}).get(PASSED_OVER):
        return False
    run.state, run.score, run.claimed_by, run.enqueued_at, run.finished_at = RunState.checked, None, None, None, None
    session.flush()
    return True


def time_if_passed_over(session: Session, run: Run, send: Callable[[int], object]) -> None:
    """A run just chosen to count whose timing was passed over: back to `checked` and committed,
    then `send(run id)` sends its timing ahead of the others (if that fails, the reconciler does).
    Commits the caller's session either way."""
    reopened = reopen_for_timing(session, run)
    session.commit()
    if reopened:
        send(run.id)
