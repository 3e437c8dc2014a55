"""Fair share of the grading queue: at most one run per student in flight.

In flight: a run sent to the broker and not final (queued with `enqueued_at` set, building,
running). A student's further runs wait in the database (queued, `enqueued_at` NULL) and are
sent one at a time, oldest first, as the previous one ends; so a student who uploads twenty
times in a minute holds one place in the broker queue, and everyone else's upload is at most
one run per other student behind.

Wiring: every new run (upload or re-grade, API and web) goes through `admit`; the reconciler
sends `dispatchable(session)` instead of every never-sent queued run; when a run becomes
final, the worker's task calls `release_after` for it.
"""
from __future__ import annotations

import enum
import logging

from celery import Celery
from sqlalchemy import ColumnElement, and_, exists, or_, select, update
from sqlalchemy.orm import Session, aliased, sessionmaker

from grader.db import session_scope
from grader.models import ACTIVE_STATES, Assignment, Run, RunState, Submission, User, utcnow
from grader.runs.dispatch import send_run

log = logging.getLogger(__name__)


def _in_flight(run: type[Run]) -> ColumnElement[bool]:
    """A run whose checks (or whole grade) are sent or under way: a run waiting for or in its timing
    no longer holds its student's next upload back (their checks come first)."""
    checking = [state for state in ACTIVE_STATES if state is not RunState.timing]
    return or_(run.state.in_(checking), and_(run.state == RunState.queued, run.enqueued_at.is_not(None)))


def dispatchable(session: Session, user_id: int | None = None) -> list[int]:
    """For every student (or only `user_id`) with nothing in flight, their oldest unsent queued
    run; oldest first. Runs of an assignment whose grading is paused are never sent (nor count
    as the oldest: a student's run of another assignment goes ahead)."""
    waiting, other = aliased(Run), aliased(Run)
    mine, theirs = aliased(Submission), aliased(Submission)
    busy = exists().where(other.submission_id == theirs.id, theirs.user_id == mine.user_id, _in_flight(other))
    paused = select(Assignment.id).where(Assignment.grading_paused.is_(True))
    older = exists().where(other.submission_id == theirs.id, theirs.user_id == mine.user_id,
                           other.state == RunState.queued, other.enqueued_at.is_(None), other.id < waiting.id,
                           theirs.assignment_id.not_in(paused))
    query = (select(waiting.id).join(mine, waiting.submission_id == mine.id)
             .where(waiting.state == RunState.queued, waiting.enqueued_at.is_(None), ~busy, ~older,
                    mine.assignment_id.not_in(paused))
             .order_by(waiting.id))
    if user_id is not None:
        query = query.where(mine.user_id == user_id)
    return list(session.scalars(query))


def _reserve(sessions: sessionmaker[Session], user_id: int) -> int | None:
    """Mark the student's next run as sent (so no one else sends one) when nothing of theirs is
    in flight; the student's row is locked meanwhile, so two uploads cannot both pass."""
    with session_scope(sessions) as session:
        session.execute(select(User.id).where(User.id == user_id).with_for_update())
        run_id = next(iter(dispatchable(session, user_id)), None)
        if run_id is not None:
            session.execute(update(Run).where(Run.id == run_id).values(enqueued_at=utcnow()))
        return run_id


def _owner(session: Session, run_id: int) -> int:
    return session.execute(select(Submission.user_id).join(Run, Run.submission_id == Submission.id)
                           .where(Run.id == run_id)).scalar_one()


def _send(celery: Celery, sessions: sessionmaker[Session], run_id: int, queue: str) -> bool:
    if send_run(celery, sessions, run_id, queue):
        return True
    with session_scope(sessions) as session:  # broker down: waiting again, the reconciler sends it
        session.execute(update(Run).where(Run.id == run_id).values(enqueued_at=None))
    return False


def release_next(celery: Celery, sessions: sessionmaker[Session], user_id: int, queue: str) -> int | None:
    """Send the student's next waiting run if nothing of theirs is in flight; its id, if sent."""
    run_id = _reserve(sessions, user_id)
    if run_id is None or not _send(celery, sessions, run_id, queue):
        return None
    return run_id


class Admission(str, enum.Enum):
    sent = "sent"  # in the broker now
    waiting = "waiting"  # behind the student's earlier run; sent when that one ends
    paused = "paused"  # its assignment's grading is paused; sent when the staff resume it
    unreachable = "unreachable"  # broker down: the reconciler sends it when it is back


def admit(celery: Celery, sessions: sessionmaker[Session], run_id: int, queue: str) -> Admission:
    """For a new run (committed, queued, never sent): send the student's next run now if they
    have none in flight, and say where `run_id` stands."""
    with session_scope(sessions) as session:
        user_id = _owner(session, run_id)
        paused = session.scalar(select(Assignment.grading_paused).join(Submission).join(Run)
                                .where(Run.id == run_id))
    reserved = _reserve(sessions, user_id)  # may be a run of another assignment of theirs
    if reserved is not None and not _send(celery, sessions, reserved, queue):
        return Admission.unreachable
    if reserved == run_id:
        return Admission.sent
    return Admission.paused if paused else Admission.waiting


def release_after(celery: Celery, sessions: sessionmaker[Session], finished_run_id: int, queue: str) -> int | None:
    """When a run is final or checked (its checks ended): send its student's next waiting run, if any; its id, if sent."""
    with session_scope(sessions) as session:
        user_id = _owner(session, finished_run_id)
    return release_next(celery, sessions, user_id, queue)
