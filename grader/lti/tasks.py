"""The LMS calls, in Celery on the service's CPU queue (KG_SIMILARITY_QUEUE), never in a request:
a link's grades sent (retried with a doubling wait while the LMS fails, for the failed students
alone: the others are not sent twice) and a course's roster read. `queue_grade_sends`, called by
the reconciler at each pass, queues the links whose grades changed; the course's LMS page and an
instructor's launch queue the others."""
from __future__ import annotations

import functools
import logging

import httpx
from celery import Celery, Task, shared_task
from sqlalchemy.orm import Session, sessionmaker

from grader.db import make_engine, make_session_factory, session_scope
from grader.lti.passback import links_with_new_grades, send_link_grades
from grader.lti.roster_sync import sync_roster
from grader.lti.services import ServiceError
from grader.models import LtiContext, LtiResourceLink, utcnow
from grader.settings import Settings, get_settings

TASK_SEND_GRADES = "kg.lti.send_grades"
TASK_SYNC_ROSTER = "kg.lti.sync_roster"
RETRIES = 8  # 30 s doubling, capped at an hour: about four hours in all
log = logging.getLogger(__name__)


def backoff_s(retries: int) -> int:
    return min(30 * 2 ** retries, 3600)


@functools.cache
def _worker_state() -> tuple[Settings, sessionmaker[Session]]:
    """One connection pool per worker process, made after the fork."""
    settings = get_settings()
    return settings, make_session_factory(make_engine(settings))


@shared_task(name=TASK_SEND_GRADES, bind=True, max_retries=RETRIES)
def send_grades_task(self: Task, link_id: int, resend: bool = False) -> str:
    settings, sessions = _worker_state()
    try:
        with session_scope(sessions) as db:
            link = db.get(LtiResourceLink, link_id)
            if link is None:
                return f"link {link_id}: gone"
            results = send_link_grades(db, settings, link, resend)
    except (ServiceError, httpx.HTTPError) as exc:
        log.warning("link %s: the LMS failed (%s); trying again", link_id, exc)
        raise self.retry(exc=exc, countdown=backoff_s(self.request.retries)) from exc
    failed = [r for r in results if r.status == "failed"]
    if failed and self.request.retries < RETRIES:
        raise self.retry(countdown=backoff_s(self.request.retries))
    counts = {status: sum(r.status == status for r in results) for status in ("sent", "unchanged", "skipped", "failed")}
    return f"link {link_id}: {counts}"


@shared_task(name=TASK_SYNC_ROSTER, bind=True, max_retries=3)
def sync_roster_task(self: Task, context_id: int) -> str:
    settings, sessions = _worker_state()
    try:
        with session_scope(sessions) as db:
            context = db.get(LtiContext, context_id)
            return f"context {context_id}: " + (sync_roster(db, settings, context).summary() if context else "gone")
    except (ServiceError, httpx.HTTPError) as exc:
        raise self.retry(exc=exc, countdown=backoff_s(self.request.retries)) from exc


def queue_send(celery: Celery, settings: Settings, link_id: int, resend: bool = False) -> None:
    celery.send_task(TASK_SEND_GRADES, args=[link_id, resend], queue=settings.similarity_queue)


def queue_roster_sync(celery: Celery, settings: Settings, context_id: int) -> None:
    celery.send_task(TASK_SYNC_ROSTER, args=[context_id], queue=settings.similarity_queue)


def queue_grade_sends(celery: Celery, settings: Settings, sessions: sessionmaker[Session]) -> list[int]:
    """Queue a send for each link whose grades changed since they were last read; the links.
    Each is stamped read as it is queued (the task reads the gradebook after), so the next pass
    queues it again only for a later change; a broker that is down leaves the stamps unchanged."""
    queued: list[int] = []
    with session_scope(sessions) as db:
        for link in links_with_new_grades(db):
            link.grades_checked_at = utcnow()
            queue_send(celery, settings, link.id)
            queued.append(link.id)
    return queued
