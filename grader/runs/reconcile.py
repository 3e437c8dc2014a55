"""The reconciler: finds runs the queue forgot and sends them again.

Covers a broker that was down at upload (queued, never sent), a message the broker lost (a
Redis restart or flush: queued, sent, but no longer in the broker), and a worker that died
mid-run (active, heartbeat stale: put back to queued first).
Sending twice is harmless: the run's claim lets only one worker grade it.
Every run it sends was failed by our side, so it goes at the front of its queue (a Redis broker's
priority, grader.celery_app), and each send is logged with its reason (`Resend`).
Each pass also queues the LMS grade sends of links whose grades changed (grader.lti.tasks).
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from celery import Celery
from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.lti.tasks import queue_grade_sends
from grader.models import ACTIVE_STATES, WAITING_STATES, Run, RunState, utcnow
from grader.runs.dispatch import held_runs, send_run, send_timing
from grader.runs.fairshare import dispatchable
from grader.settings import Settings

log = logging.getLogger(__name__)


class Resend(str, enum.Enum):
    """Why the reconciler sends a run (the log line's words)."""

    worker_died = "its worker died (no heartbeat)"
    message_lost = "the broker lost its message"
    never_sent = "it was never sent (the broker was down, or the send after the student's previous run failed)"


@dataclass
class ReconcileReport:
    resent: list[int] = field(default_factory=list)
    unreachable: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # sent, but the broker no longer held them
    grade_sends: list[int] = field(default_factory=list)  # LMS links whose changed grades were queued
    reasons: dict[int, Resend] = field(default_factory=dict)  # every run it meant to send, and why


def forgotten_runs(session: Session, settings: Settings) -> dict[int, Resend]:
    """Queued runs sent so long ago that the message was probably lost, and the never-sent runs
    that fair share lets go now (each student's oldest, when nothing of theirs is in flight)."""
    sent_long_ago = utcnow() - timedelta(seconds=settings.requeue_after_s)
    lost = select(Run.id).where(Run.state.in_(WAITING_STATES), Run.enqueued_at < sent_long_ago)
    # a checked run's timing is never held back by fair share: its student's checks are done
    untimed = select(Run.id).where(Run.state == RunState.checked, Run.enqueued_at.is_(None))
    return {**dict.fromkeys(dispatchable(session), Resend.never_sent),
            **dict.fromkeys(session.scalars(untimed), Resend.never_sent),
            **dict.fromkeys(session.scalars(lost), Resend.message_lost)}


def unheld_runs(session: Session, settings: Settings, held: set[int], checked_at: datetime) -> list[int]:
    """Queued runs sent more than `resend_unheld_after_s` before the broker was read whose
    message it did not hold. The margin covers a worker between taking a message and claiming
    its run; a run sent after the read is never counted as lost."""
    cutoff = checked_at - timedelta(seconds=settings.resend_unheld_after_s)
    sent = session.scalars(select(Run.id).where(Run.state.in_(WAITING_STATES), Run.enqueued_at < cutoff))
    return sorted(set(sent) - held)


def _mark_unsent(session: Session, run_ids: list[int]) -> None:
    """A lost message's run is unsent again: the run page says it waits to be re-sent, and if the
    send below fails, fair share and the next pass treat it as never sent."""
    if run_ids:
        session.execute(update(Run).where(Run.id.in_(run_ids), Run.state.in_(WAITING_STATES))
                        .values(enqueued_at=None))


def _requeue_abandoned(session: Session, settings: Settings) -> list[int]:
    """Active runs whose worker stopped beating go back to waiting (and lose their claim, so
    a worker that was merely slow cannot record a result over the next attempt's): `queued`, or
    `checked` for a timing piece (its checks' verdicts stay); their ids."""
    stale = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s)
    gone = or_(Run.heartbeat_at.is_(None), Run.heartbeat_at < stale)
    back = [(RunState.timing, RunState.checked)] + [(state, RunState.queued) for state in ACTIVE_STATES
                                                    if state is not RunState.timing]
    return sorted(run_id for active, waiting in back for run_id in session.scalars(
        update(Run)
        .where(Run.state == active, gone)
        # a timing's next claim (of a checked run) counts no attempt: this one is counted here
        .values(state=waiting, claimed_by=None, heartbeat_at=None, enqueued_at=None,
                attempts=Run.attempts + (1 if active is RunState.timing else 0))
        .returning(Run.id)
    ))


def broker_queues(settings: Settings) -> list[str]:
    return [settings.task_queue, *([settings.build.queue] if settings.build.queue else [])]


def reconcile(settings: Settings, sessions: sessionmaker[Session], celery: Celery) -> ReconcileReport:
    with session_scope(sessions) as session:
        abandoned = _requeue_abandoned(session, settings)
    if abandoned:
        log.warning("runs %s: their worker stopped beating; queued again", abandoned)
    report = ReconcileReport()
    checked_at = utcnow()  # before the read: a run sent meanwhile is younger than the cutoff
    held = held_runs(celery, broker_queues(settings))
    with session_scope(sessions) as session:
        if held is not None:
            report.lost = unheld_runs(session, settings, held, checked_at)
            _mark_unsent(session, report.lost)
        # a requeued run is also unsent (fair share lets it go): its reason is its worker's death
        report.reasons = {**forgotten_runs(session, settings), **dict.fromkeys(report.lost, Resend.message_lost)}
        report.reasons.update((run_id, Resend.worker_died) for run_id in abandoned if run_id in report.reasons)
        timings = set(session.scalars(select(Run.id).where(Run.id.in_(report.reasons), Run.state == RunState.checked)))
    if report.lost:
        log.warning("the broker no longer holds the tasks of queued runs %s; sending them again", report.lost)
    for run_id, reason in sorted(report.reasons.items()):
        if run_id in timings and send_timing(celery, sessions, run_id, settings.task_queue, first=True):
            report.resent.append(run_id)
            log.info("run %s: its timing sent ahead of the other timings: %s", run_id, reason.value)
        elif run_id not in timings and send_run(celery, sessions, run_id, settings.task_queue, resent=True):
            report.resent.append(run_id)
            log.info("run %s sent to the front of its queue: %s", run_id, reason.value)
        else:
            report.unreachable.append(run_id)
            log.warning("run %s not sent (%s): the broker is unreachable; the next pass tries again",
                        run_id, reason.value)
            break  # broker down: the rest would fail the same way
    if not report.unreachable:
        try:
            report.grade_sends = queue_grade_sends(celery, settings, sessions)
        except Exception as exc:  # kombu raises OperationalError and friends: the next pass tries again
            log.warning("could not queue the LMS grade sends: %s", exc)
    return report
