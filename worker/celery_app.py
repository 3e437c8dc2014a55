"""The Celery application. Configuration only: the task lives in worker.tasks, the work in
worker.pipeline (which knows nothing of Celery).

Start a worker:  celery -A worker.celery_app worker -Q grading --concurrency 1
"""
from __future__ import annotations

from celery import Celery

from grader.settings import Settings, get_settings

TASK_GRADE_RUN = "kernelgrade.grade_run"


def make_celery(settings: Settings) -> Celery:
    app = Celery("kernelgrade", broker=settings.resolved_broker_url, include=["worker.tasks"])
    app.conf.update(
        # A task is acknowledged only after it finished; a worker that dies mid-task gets its
        # message redelivered. The run's claim in the database makes redelivery idempotent.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=settings.task_soft_time_limit_s,
        task_time_limit=settings.task_time_limit_s,
        task_ignore_result=True,  # the database is the source of truth, not a result backend
        task_default_queue=settings.task_queue,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_send_task_events=False,
    )
    if settings.resolved_broker_url.startswith(("redis://", "rediss://")):
        # An unacknowledged message is handed out again after this long; it must outlast the
        # longest task, or a live run would be delivered twice (the run's claim would still
        # stop a double grade). The SQLite transport passes these options to create_engine.
        app.conf.broker_transport_options = {"visibility_timeout": settings.task_time_limit_s + 300}
    return app


celery = make_celery(get_settings())
