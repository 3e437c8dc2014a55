"""The Celery application, by a factory (`make_celery`). Configuration only: the tasks are shared
tasks (bound to whichever app a process makes) in grader.runs.tasks, grader.similarity.jobs and
grader.course.roster_jobs, the work in worker.pipeline (which knows nothing of Celery).

Queues (names from grader.settings):
- the run queue, `task_queue`: every grading task. With KG_GPU_MODEL set it is named after the
  model ("gpu-h200"), so a course's GPU workers of one model share a queue and a second worker
  is just another process consuming it (one per GPU, concurrency 1).
- the build queue, `build.queue` (KG_BUILD_QUEUE, optional): `prebuild` tasks for CPU workers, which compile a
  run's kernels into the shared, content-addressed build cache before the run is sent on to the
  run queue (grader.runs.dispatch chains the two).
- the similarity queue, `similarity_queue`: the service's CPU work off the run queue, similarity
  reports (grader.similarity.jobs), roster imports (grader.course.roster_jobs, password hashing)
  and the LMS's services (grader.lti.tasks: grades sent, rosters read).

Priorities (Redis brokers): a run the reconciler sends again because our side failed it (its
worker died, the broker lost its message, the broker was down at upload) is published at
`PRIORITY_RESENT`, every other message at `PRIORITY_ORDINARY`, so the re-sent run is delivered
before the runs uploaded after it that are still waiting. A run's timing piece
(`TASK_TIME_RUN`, worker.pieces) travels at `PRIORITY_TIMING`, behind every check waiting in its
queue: correctness verdicts first, speed when the GPU is free; one re-sent, or of a run chosen to
count after it was passed over, at `PRIORITY_TIMING_FIRST`, ahead of the other timings but still
behind the checks. The embedded SQLite broker ignores
priorities (its messages are delivered in the order they were sent): there a re-sent run waits
at the back, as before.

Start a worker:  grader worker   (= celery -A grader.celery_app worker -Q <KG_TASK_QUEUE> --concurrency 1)
"""
from __future__ import annotations

import functools

from celery import Celery
from kombu import Connection

from grader.settings import Settings, get_settings

TASK_GRADE_RUN = "kernelgrade.grade_run"
TASK_PREBUILD = "kernelgrade.prebuild"
TASK_TIME_RUN = "kernelgrade.time_run"

# kombu's Redis transport keeps one list per priority step and a worker pops the lowest step
# first, so 0 is the most urgent and the default (a message with no priority) is 0 too: every
# message this app sends therefore carries the ordinary step (a route of every task, below), and
# only a re-send says PRIORITY_RESENT. 3 is one of kombu's default steps, so a worker without
# this app's `priority_steps` still reads the ordinary list.
PRIORITY_RESENT = 0
PRIORITY_ORDINARY = 3
PRIORITY_TIMING_FIRST = 5
PRIORITY_TIMING = 6
REDIS_PRIORITY_STEPS = [PRIORITY_RESENT, PRIORITY_ORDINARY, PRIORITY_TIMING_FIRST, PRIORITY_TIMING]


def task_routes(settings: Settings) -> dict[str, dict[str, str | int]]:
    """Queue and priority by task name. The catch-all gives every other task (sent to a named
    queue: similarity, rosters, the LMS) the ordinary priority too, so a worker that takes the
    run queue and the CPU queue keeps taking them in turn, as without priorities. A priority
    given when sending (a re-send's) wins over the route's."""
    routes: dict[str, dict[str, str | int]] = {
        TASK_GRADE_RUN: {"queue": settings.task_queue, "priority": PRIORITY_ORDINARY},
        TASK_TIME_RUN: {"queue": settings.task_queue, "priority": PRIORITY_TIMING}}
    if settings.build.queue:
        routes[TASK_PREBUILD] = {"queue": settings.build.queue, "priority": PRIORITY_ORDINARY}
    routes["*"] = {"priority": PRIORITY_ORDINARY}
    return routes


def build_queue_of(app: Celery) -> str | None:
    """The build queue this app routes `prebuild` to, or None when builds are not split off."""
    route = (app.conf.task_routes or {}).get(TASK_PREBUILD)
    return route["queue"] if route else None


def make_celery(settings: Settings) -> Celery:
    app = Celery("kernelgrade", broker=settings.resolved_broker_url,
                 include=["grader.runs.tasks", "grader.runs.worker_start", "grader.runs.worker_stop", "grader.similarity.jobs",
                          "grader.course.roster_jobs", "grader.lti.tasks"])
    app.conf.update(
        # A task is acknowledged only after it finished; a worker that dies mid-task gets its
        # message redelivered. The run's claim in the database makes redelivery idempotent.
        # With late acks and a prefetch of 1 a busy worker holds no message beyond the one it
        # runs: it picks its next message only once free, so a run re-sent meanwhile at
        # PRIORITY_RESENT is the one it takes (with early acks it would already hold the next
        # ordinary message, and the re-sent run would come after that one).
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=settings.task_soft_time_limit_s,
        task_time_limit=settings.task_time_limit_s,
        task_ignore_result=True,  # the database is the source of truth, not a result backend
        task_default_queue=settings.task_queue,
        task_routes=task_routes(settings),
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_send_task_events=False,
    )
    if settings.resolved_broker_url.startswith(("redis://", "rediss://")):
        # An unacknowledged message is handed out again after this long; it must outlast the
        # longest task, or a live run would be delivered twice (the run's claim would still
        # stop a double grade). The SQLite transport passes these options to create_engine.
        # Two priority lists per queue (see PRIORITY_RESENT); between the queues a worker takes,
        # kombu's default `queue_order_strategy` (round robin) stays: the priority steps come first
        # whatever the strategy, it only orders queues of the same step.
        app.conf.broker_transport_options = {"visibility_timeout": settings.task_time_limit_s + 300,
                                             "priority_steps": REDIS_PRIORITY_STEPS}
    return app


def declare_queues(settings: Settings) -> None:
    """Create the service's queues in the broker before any worker or web process uses it. The
    embedded (SQLite) transport creates a queue's row on first use with no lock between processes:
    two workers starting together could both insert it, and one died of the unique constraint."""
    names = [settings.task_queue, settings.similarity_queue, *([settings.build.queue] if settings.build.queue else [])]
    with Connection(settings.resolved_broker_url) as connection:
        channel = connection.default_channel
        for name in names:
            channel.queue_declare(queue=name)


@functools.cache
def worker_app() -> Celery:
    """The app of this process's settings (the environment's), built on first use: the one
    `celery -A grader.celery_app` finds, as `celery`. Importing a task module builds none."""
    return make_celery(get_settings())


def __getattr__(name: str) -> Celery:
    if name == "celery":  # what Celery's command line looks up in this module
        return worker_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
