"""The embedded (SQLite) broker's queues exist before any worker starts (grader.cli.init_database):
kombu's SQLite transport inserts a queue's row on first use without a lock between processes,
so two workers starting at once could both insert it and one died of the unique constraint.
It also delivers a re-sent run, in the order sent: the SQLite transport has no priorities."""
from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

from kombu import Connection

from grader.celery_app import make_celery
from grader.cli.main import init_database
from grader.runs.dispatch import run_signature
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


def test_the_embedded_broker_takes_a_resent_run_in_the_order_sent(tmp_path: Path) -> None:
    """The SQLite transport ignores a message's priority: a re-sent run is delivered, after the
    messages sent before it (grader.celery_app: only a Redis broker puts it in front)."""
    settings = Settings.from_variables({"KG_DATA_DIR": str(tmp_path / "var")})
    init_database(settings)
    celery = make_celery(settings)
    run_signature(celery, 1, settings.task_queue).apply_async()
    run_signature(celery, 2, settings.task_queue, resent=True).apply_async()
    with Connection(settings.resolved_broker_url) as connection:  # what a worker's channel pops next
        channel = connection.default_channel
        messages = [channel._get(settings.task_queue) for _ in range(2)]
    delivered = [json.loads(base64.b64decode(message["body"]))[0] for message in messages]
    assert delivered == [[1], [2]]
