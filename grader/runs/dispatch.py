"""Sending grading tasks to the broker, and noticing when that fails.

The database is the source of truth: a run that could not be sent stays `queued` with no
`enqueued_at`, and the reconciler sends it when the broker is back.

When the app routes builds to a CPU queue (KG_BUILD_QUEUE), a run is sent as a chain:
`prebuild` on the build queue, then the grading task on `queue`. The prebuild never fails the
chain (grader.runs.tasks.prebuild), so the grading task is always sent on once it ran.

A run sent again because our side failed it (`resent`, the reconciler's) travels at
`PRIORITY_RESENT`: ahead of the ordinary messages waiting in its queue (grader.celery_app).

`held_runs` reads what a Redis broker holds, so the reconciler can tell a message the broker
lost (a restart without persistence, a flushed list) from one that is merely waiting;
`queue_lengths` how many wait in each queue (the service's metrics).
"""
from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from celery import Celery
from celery.canvas import Signature, chain
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from grader.celery_app import (
    PRIORITY_RESENT,
    PRIORITY_TIMING,
    PRIORITY_TIMING_FIRST,
    TASK_GRADE_RUN,
    TASK_PREBUILD,
    TASK_TIME_RUN,
    build_queue_of,
)
from grader.db import session_scope
from grader.models import Run, utcnow
from grader.settings import Settings

log = logging.getLogger(__name__)


class HasBroker(Protocol):
    """What sending needs of the app's context (grader.context.AppContext)."""

    celery: Celery
    sessions: sessionmaker[Session]
    settings: Settings

T = TypeVar("T")

# Fail fast when the broker is down: the upload is already safe, a client should not wait.
_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def run_signature(celery: Celery, run_id: int, queue: str, resent: bool = False) -> Signature:
    """What to publish for `run_id`: the grading task on `queue`, after a prebuild when the app
    routes builds to a build queue; at the front of the queues when `resent`, else at the
    routes' ordinary priority."""
    options = {"priority": PRIORITY_RESENT} if resent else {}
    grade = celery.signature(TASK_GRADE_RUN, args=[run_id], queue=queue, immutable=True, **options)
    build_queue = build_queue_of(celery)
    if build_queue is None:
        return grade
    return chain(celery.signature(TASK_PREBUILD, args=[run_id], queue=build_queue, immutable=True, **options), grade)


def send_run(celery: Celery, sessions: sessionmaker[Session], run_id: int, queue: str, resent: bool = False) -> bool:
    """Publish the grading task for `run_id` (see run_signature); True when the broker accepted it."""
    return _published(sessions, run_id, lambda: run_signature(celery, run_id, queue, resent))


def send_timing(celery: Celery, sessions: sessionmaker[Session], run_id: int, queue: str, first: bool = False) -> bool:
    """Publish the timing piece of the `checked` run `run_id` (behind the waiting checks; ahead of
    the other timings when `first`: re-sent, or chosen to count); True when the broker accepted it."""
    priority = PRIORITY_TIMING_FIRST if first else PRIORITY_TIMING
    return _published(sessions, run_id, lambda: celery.signature(
        TASK_TIME_RUN, args=[run_id], queue=queue, immutable=True, priority=priority))


def chosen_timing(ctx: HasBroker) -> Callable[[int], bool]:
    """A run's timing sent first (a run chosen to count after its timing was passed over)."""
    return lambda run_id: send_timing(ctx.celery, ctx.sessions, run_id, ctx.settings.task_queue, first=True)


def _published(sessions: sessionmaker[Session], run_id: int, signature: Callable[[], Signature]) -> bool:
    """`signature()` published, and the run's `enqueued_at` set; False (and logged) when the broker refused it."""
    try:
        signature().apply_async(retry=True, retry_policy=_PUBLISH_RETRY)
    except Exception as exc:  # kombu raises OperationalError and friends; any failure counts
        log.warning("broker unavailable, run %s waits to be sent: %s", run_id, exc)
        return False
    with session_scope(sessions) as session:
        session.execute(update(Run).where(Run.id == run_id).values(enqueued_at=utcnow()))
    return True


def held_runs(celery: Celery, queues: Iterable[str]) -> set[int] | None:
    """Ids of the runs the broker holds a task for: waiting in one of `queues` or delivered to a
    worker and not yet acknowledged (a running task, a retry's countdown). None when the broker
    cannot tell: it is not Redis, or it cannot be read now."""
    return _read_redis(celery, lambda channel: {
        run_id for payload in _redis_payloads(channel, queues) if (run_id := _run_of(payload)) is not None})


def queue_lengths(celery: Celery, queues: Iterable[str]) -> dict[str, int] | None:
    """queue -> tasks waiting in it (not yet delivered to a worker); None when the broker cannot
    tell, as for held_runs."""
    return _read_redis(celery, lambda channel: {
        queue: sum(channel.client.llen(key) for key in queue_keys(channel, [queue])) for queue in queues})


def _read_redis(celery: Celery, read: Callable[[Any], T]) -> T | None:
    """`read` of the broker's Redis channel; None when the broker is not Redis or cannot be read now."""
    try:
        with celery.connection_for_read() as conn:
            if conn.transport.driver_type != "redis":
                return None
            conn.ensure_connection(max_retries=1)
            return read(conn.default_channel)
    except Exception as exc:  # an unreadable broker only means we cannot tell
        log.warning("could not read the broker's queues: %s", exc)
        return None


def queue_keys(channel: Any, queues: Iterable[str]) -> list[str]:
    """The Redis lists kombu keeps the queues in (one per priority step: a re-sent run's and the
    ordinary one, grader.celery_app), by its own key names, so that a key prefix is honoured."""
    return sorted({channel._q_for_pri(queue, pri) for queue in queues for pri in channel.priority_steps})


def _redis_payloads(channel: Any, queues: Iterable[str]) -> Iterator[Any]:
    """Every message in the queues' lists and in the unacked hash, as kombu's Redis transport
    stores them."""
    client = channel.client
    for key in queue_keys(channel, queues):
        for raw in client.lrange(key, 0, -1):
            yield _loads(raw)
    for raw in client.hvals(channel.unacked_key):
        entry = _loads(raw)  # [message, exchange, routing key]
        yield entry[0] if isinstance(entry, list) and entry else None


def _loads(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _run_of(payload: Any) -> int | None:
    """The run id of a grading, timing or prebuild task message (protocol 2, JSON body), else None."""
    if not isinstance(payload, dict):
        return None
    headers = payload.get("headers") or {}
    if headers.get("task") not in (TASK_GRADE_RUN, TASK_PREBUILD, TASK_TIME_RUN):
        return None
    try:
        body: Any = payload["body"]
        if (payload.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return int(args[0])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
