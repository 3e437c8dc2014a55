"""The reconciler: finds runs the queue forgot and sends them again.

Covers a broker that was down at upload (queued, never sent), a message the broker lost (a
Redis restart or flush: queued, sent, but no longer in the broker), and a worker that died
mid-run (active, heartbeat stale: put back to queued first).
Sending twice is harmless: the run's claim lets only one worker grade it.
Each pass also queues the LMS grade sends of links whose grades changed (grader.lti.tasks).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from celery import Celery
from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.lti.tasks import queue_grade_sends
from grader.models import ACTIVE_STATES, Run, RunState, utcnow
from grader.runs.dispatch import held_runs, send_run
from grader.runs.fairshare import dispatchable
from grader.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    resent: list[int] = field(default_factory=list)
    unreachable: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # sent, but the broker no longer held them
    grade_sends: list[int] = field(default_factory=list)  # LMS links whose changed grades were queued


def forgotten_runs(session: Session, settings: Settings) -> list[int]:
    """Queued runs sent so long ago that the message was probably lost, and the never-sent runs
    that fair share lets go now (each student's oldest, when nothing of theirs is in flight)."""
    sent_long_ago = utcnow() - timedelta(seconds=settings.requeue_after_s)
    lost = select(Run.id).where(Run.state == RunState.queued, Run.enqueued_at < sent_long_ago)
    return sorted({*session.scalars(lost), *dispatchable(session)})


def unheld_runs(session: Session, settings: Settings, held: set[int], checked_at: datetime) -> list[int]:
    """Queued runs sent more than `resend_unheld_after_s` before the broker was read whose
    message it did not hold. The margin covers a worker between taking a message and claiming
    its run; a run sent after the read is never counted as lost."""
    cutoff = checked_at - timedelta(seconds=settings.resend_unheld_after_s)
    sent = session.scalars(select(Run.id).where(Run.state == RunState.queued, Run.enqueued_at < cutoff))
    return sorted(set(sent) - held)


def _mark_unsent(session: Session, run_ids: list[int]) -> None:
    """A lost message's run is unsent again: the run page says it waits to be re-sent, and if the
    send below fails, fair share and the next pass treat it as never sent."""
    if run_ids:
        session.execute(update(Run).where(Run.id.in_(run_ids), Run.state == RunState.queued)
                        .values(enqueued_at=None))


def _requeue_abandoned(session: Session, settings: Settings) -> None:
    """Active runs whose worker stopped beating go back to `queued` (and lose their claim, so
    a worker that was merely slow cannot record a result over the next attempt's)."""
    stale = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s)
    session.execute(
        update(Run)
        .where(Run.state.in_(ACTIVE_STATES), or_(Run.heartbeat_at.is_(None), Run.heartbeat_at < stale))
        .values(state=RunState.queued, claimed_by=None, heartbeat_at=None, enqueued_at=None)
    )


def broker_queues(settings: Settings) -> list[str]:
    return [settings.task_queue, *([settings.build.queue] if settings.build.queue else [])]


def reconcile(settings: Settings, sessions: sessionmaker[Session], celery: Celery) -> ReconcileReport:
    with session_scope(sessions) as session:
        _requeue_abandoned(session, settings)
    report = ReconcileReport()
    checked_at = utcnow()  # before the read: a run sent meanwhile is younger than the cutoff
    held = held_runs(celery, broker_queues(settings))
    with session_scope(sessions) as session:
        if held is not None:
            report.lost = unheld_runs(session, settings, held, checked_at)
            _mark_unsent(session, report.lost)
        run_ids = sorted({*forgotten_runs(session, settings), *report.lost})
    if report.lost:
        log.warning("the broker no longer holds the tasks of queued runs %s; sending them again", report.lost)
    for run_id in run_ids:
        if send_run(celery, sessions, run_id, settings.task_queue):
            report.resent.append(run_id)
        else:
            report.unreachable.append(run_id)
            break  # broker down: the rest would fail the same way
    if not report.unreachable:
        try:
            report.grade_sends = queue_grade_sends(celery, settings, sessions)
        except Exception as exc:  # kombu raises OperationalError and friends: the next pass tries again
            log.warning("could not queue the LMS grade sends: %s", exc)
    return report
