"""Engine and session factory built from the settings."""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from grader.datadir import private_dir, private_file
from grader.settings import Settings

_ENGINES: dict[tuple[str, int], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def make_engine(settings: Settings) -> Engine:
    """This process's engine for the settings' database: one connection pool per database and
    process, however many apps, commands or tests ask (each used to open a pool of its own,
    up to 15 connections apiece). Keyed by pid too: a forked child must not share its
    parent's connections."""
    url = settings.resolved_database_url
    key = (url, os.getpid())
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = _create_engine(settings, url)
        return _ENGINES[key]


def _create_engine(settings: Settings, url: str) -> Engine:
    if url.startswith("sqlite"):
        private_dir(settings.data_dir)
        if not settings.database_url:  # the embedded database: 0600 before SQLite creates it (its -wal/-shm follow)
            private_file(settings.embedded_database_path)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            # WAL lets the web app read while the worker writes; FKs are off by default.
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
