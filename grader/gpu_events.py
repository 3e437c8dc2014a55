"""The record of what happened to each GPU's worker under `grader worker --gpus`: the supervisor
(grader.gpu_workers.Supervisor) tells each first start, restart and leaving out of a GPU's
worker to `event_recorder`'s function, which writes a gpu_worker_events row; the site
administrators' /ops/workers page (grader.pages.workers) reads the recent faults and the GPUs
out now from here.

A GPU is out when the newest row of its host and index says left_out: its supervisor has not
started it since (a supervisor started afresh writes `started` for each of its GPUs). A GPU's
rows older than KG_GPU_EVENT_RETENTION_DAYS go when it has a new one, so the newest stays.

A database that cannot be written costs the row, never the supervisor: the failure is one log
line and the workers go on being watched and restarted. One that does not answer holds the
supervisor's loop (its restarts, its handling of SIGTERM) for CONNECT_TIMEOUT_S at most per row:
the recorder's PostgreSQL connections have a connect and a statement timeout.
"""
from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import create_engine, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.db import make_engine, make_session_factory, session_scope
from grader.gpu_workers import WorkerEvent
from grader.models import GpuWorkerEvent, utcnow
from grader.settings import Settings

log = logging.getLogger("grader.gpu_workers")  # beside the supervisor's own lines
FAULTS = ("restarted", "left_out")
CONNECT_TIMEOUT_S = 5


def this_host() -> str:
    """The host name rows are recorded under: the one Celery's `%h` node names use."""
    return socket.gethostname()


def event_row(host: str, event: WorkerEvent) -> GpuWorkerEvent:
    return GpuWorkerEvent(host=host, gpu_index=event.gpu.index, gpu_uuid=event.gpu.uuid, kind=event.kind,
                          exit_code=event.exit_code, signal=event.signal, restarts=event.restarts)


def record_event(sessions: sessionmaker[Session], host: str, event: WorkerEvent,
                 retention: timedelta | None = None) -> bool:
    """Write `event`'s row and, with a `retention`, drop its GPU's rows older than that (the new
    row, its newest, stays); False, after a log line, when the database refused or was away."""
    try:
        with session_scope(sessions) as session:
            session.add(event_row(host, event))  # stamped now, so never older than the retention
            if retention is not None:
                session.execute(delete(GpuWorkerEvent).where(
                    GpuWorkerEvent.host == host, GpuWorkerEvent.gpu_index == event.gpu.index,
                    GpuWorkerEvent.at < utcnow() - retention))
        return True
    except Exception as exc:  # whatever the database does, the supervisor must go on watching
        log.error("GPU %d: cannot record its worker's %s in the database (%s: %s); the supervisor goes on",
                  event.gpu.index, event.kind, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return False


def event_recorder(settings: Settings, host: str | None = None) -> Callable[[WorkerEvent], None]:
    """The supervisor's `on_event` for `grader worker --gpus`: each event a row of this host's."""
    sessions = _recorder_sessions(settings)
    name = host or this_host()

    def record(event: WorkerEvent) -> None:
        record_event(sessions, name, event, timedelta(days=settings.gpu_event_retention_days))
    return record


def _recorder_sessions(settings: Settings) -> sessionmaker[Session]:
    if settings.is_embedded:  # SQLite: a local file, its own 30 s lock timeout (grader.db)
        return make_session_factory(make_engine(settings))
    limits = {"connect_timeout": CONNECT_TIMEOUT_S, "options": f"-c statement_timeout={CONNECT_TIMEOUT_S * 1000}"}
    return make_session_factory(create_engine(settings.resolved_database_url, pool_pre_ping=True,
                                              connect_args=limits))


def recent_faults(session: Session, limit: int = 100) -> list[GpuWorkerEvent]:
    """The newest restarts and leavings out, newest first."""
    return list(session.scalars(select(GpuWorkerEvent).where(GpuWorkerEvent.kind.in_(FAULTS))
                                .order_by(GpuWorkerEvent.id.desc()).limit(limit)))


def gpus_out(session: Session) -> list[GpuWorkerEvent]:
    """Each GPU left out and not started since: its leaving-out row, by host and index."""
    newest = (select(func.max(GpuWorkerEvent.id))
              .group_by(GpuWorkerEvent.host, GpuWorkerEvent.gpu_index))
    return list(session.scalars(select(GpuWorkerEvent)
                                .where(GpuWorkerEvent.id.in_(newest), GpuWorkerEvent.kind == "left_out")
                                .order_by(GpuWorkerEvent.host, GpuWorkerEvent.gpu_index)))
