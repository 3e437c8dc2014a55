"""The reconciler: finds runs the queue forgot and sends them again.

Covers a broker that was down at upload (queued, never sent), a message lost with a broker
restart (queued, sent long ago), and a worker that died mid-run (active, heartbeat stale:
put back to queued first).
Sending twice is harmless: the run's claim lets only one worker grade it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from celery import Celery
from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.dispatch import send_run
from grader.fairshare import dispatchable
from grader.models import ACTIVE_STATES, Run, RunState, utcnow
from grader.settings import Settings


@dataclass
class ReconcileReport:
    resent: list[int] = field(default_factory=list)
    unreachable: list[int] = field(default_factory=list)


def forgotten_runs(session: Session, settings: Settings) -> list[int]:
    """Queued runs sent so long ago that the message was probably lost, and the never-sent runs
    that fair share lets go now (each student's oldest, when nothing of theirs is in flight)."""
    sent_long_ago = utcnow() - timedelta(seconds=settings.requeue_after_s)
    lost = select(Run.id).where(Run.state == RunState.queued, Run.enqueued_at < sent_long_ago)
    return sorted({*session.scalars(lost), *dispatchable(session)})


def _requeue_abandoned(session: Session, settings: Settings) -> None:
    """Active runs whose worker stopped beating go back to `queued` (and lose their claim, so
    a worker that was merely slow cannot record a result over the next attempt's)."""
    stale = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s)
    session.execute(
        update(Run)
        .where(Run.state.in_(ACTIVE_STATES), or_(Run.heartbeat_at.is_(None), Run.heartbeat_at < stale))
        .values(state=RunState.queued, claimed_by=None, heartbeat_at=None, enqueued_at=None)
    )


def reconcile(settings: Settings, sessions: sessionmaker[Session], celery: Celery) -> ReconcileReport:
    with session_scope(sessions) as session:
        _requeue_abandoned(session, settings)
        run_ids = forgotten_runs(session, settings)
    report = ReconcileReport()
    for run_id in run_ids:
        if send_run(celery, sessions, run_id, settings.task_queue):
            report.resent.append(run_id)
        else:
            report.unreachable.append(run_id)
            break  # broker down: the rest would fail the same way
    return report
