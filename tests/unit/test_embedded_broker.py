"""The embedded (SQLite) broker's queues exist before any worker starts (grader.cli.init_database):
kombu's SQLite transport inserts a queue's row on first use without a lock between processes,
so two workers starting at once could both insert it and one died of the unique constraint."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from kombu import Connection

from grader.cli import init_database
from grader.settings import Settings


def queue_rows(broker: Path) -> list[str]:
    with sqlite3.connect(broker) as db:
        return sorted(name for (name,) in db.execute("SELECT name FROM kombu_queue"))


def test_init_database_creates_the_embedded_brokers_queues_once(tmp_path: Path) -> None:
    settings = Settings.from_variables({"KG_DATA_DIR": str(tmp_path / "var"), "KG_BUILD_QUEUE": "builds"})
    init_database(settings)
    assert queue_rows(settings.embedded_broker_path) == ["builds", "grading", "similarity"]

    init_database(settings)  # a restart, and a worker's own declaration, find the rows there
    with Connection(settings.resolved_broker_url) as connection:
        connection.default_channel.queue_declare(queue="grading")
    assert queue_rows(settings.embedded_broker_path) == ["builds", "grading", "similarity"]


def test_a_networked_broker_is_not_contacted_at_migration(tmp_path: Path) -> None:
    settings = Settings.from_variables({"KG_DATA_DIR": str(tmp_path / "var"),
                                        "KG_BROKER_URL": "redis://127.0.0.1:1/0"})
    init_database(settings)  # nothing listens on port 1: declaring there would fail
    assert not settings.embedded_broker_path.exists()
