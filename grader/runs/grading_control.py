"""An instructor's controls over an assignment's grading: pause (drain) and resume.

Paused, an assignment's new runs (uploads and re-grades) are stored and queued as usual but
never sent to the broker: grader.runs.fairshare.dispatchable leaves them out, so neither `admit`,
the worker's release of a student's next run, nor the reconciler sends them. What was already
sent stays in flight and finishes (draining); `in_flight` lists it. Resuming sends each
waiting student's next run at once, through fair share (one per student in flight).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from celery import Celery
from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from grader.db import session_scope
from grader.models import ACTIVE_STATES, Assignment, Run, RunState, Submission, User
from grader.runs.fairshare import dispatchable, release_next
from grader.service import get_assignment


@dataclass(frozen=True)
class InFlightRun:
    run_id: int
    username: str
    state: RunState
    reason: str  # upload | regrade
    since: datetime | None  # claimed, else sent to the broker


@dataclass(frozen=True)
class GradingState:
    paused: bool
    in_flight: list[InFlightRun]  # sent to the broker and not final
    waiting: int  # queued runs never sent (held by the pause or by fair share)

    @property
    def drained(self) -> bool:
        return self.paused and not self.in_flight


def set_paused(session: Session, slug: str, paused: bool) -> Assignment:
    row = get_assignment(session, slug)
    row.grading_paused = paused
    session.flush()
    return row


def grading_state(session: Session, assignment: Assignment) -> GradingState:
    sent = or_(Run.state.in_(ACTIVE_STATES), and_(Run.state == RunState.queued, Run.enqueued_at.is_not(None)))
    rows = session.execute(
        select(Run.id, User.username, Run.state, Run.reason, func.coalesce(Run.started_at, Run.enqueued_at))
        .join(Submission, Run.submission_id == Submission.id).join(User, Submission.user_id == User.id)
        .where(Submission.assignment_id == assignment.id, sent).order_by(Run.id)
    )
    waiting = session.scalar(
        select(func.count(Run.id)).join(Submission, Run.submission_id == Submission.id)
        .where(Submission.assignment_id == assignment.id, Run.state == RunState.queued, Run.enqueued_at.is_(None))
    )
    return GradingState(assignment.grading_paused, [InFlightRun(*row) for row in rows], int(waiting or 0))


def resume(celery: Celery, sessions: sessionmaker[Session], slug: str, queue: str) -> list[int]:
    """Un-pause `slug` and send every student's next waiting run now (fair share: one each);
    the ids sent. The rest follow as those finish."""
    with session_scope(sessions) as session:
        assignment = set_paused(session, slug, False)
        owners = session.scalars(
            select(Submission.user_id).join(Run, Run.submission_id == Submission.id)
            .where(Run.id.in_(dispatchable(session)), Submission.assignment_id == assignment.id)
        ).all()
    return [run_id for user_id in owners if (run_id := release_next(celery, sessions, user_id, queue)) is not None]
