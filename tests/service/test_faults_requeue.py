"""A run interrupted by our fault keeps its place (issue 55): its worker is SIGKILLed mid-grade,
later uploads queue up while no worker is alive, and `grader reconcile --loop` (its own process,
as production runs it) sends the run again: the next worker takes it first, then the later runs
in the order they came. Before, the re-sent message went to the back, behind every upload made
since (in a drill, ~75 of them).

Real parts: Redis (the machine's, on a queue of this test's own), PostgreSQL, Celery worker
processes with the small CPU GPU stage (tests/faults/small_worker.py).
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from grader.celery_app import make_celery
from grader.db import make_engine, make_session_factory
from grader.runs.dispatch import held_runs, queue_lengths
from grader.settings import Settings
from tests.service.conftest import WorkerProcess, new_student, own_database, wait_for_run
from tests.service.test_faults import (  # noqa: F401  (fixtures)
    Rig,
    graded_once,
    make_rig,
    post,
    pytestmark,
    standin_zip,
    unique,
)
from tests.service.test_faults_recovery import Reconciler

LATER_UPLOADS = 4
TIMESTAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}"


def _wait_for(what: str, done: Callable[[], bool], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s; {log.name}:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.3)


def _claim_order(worker: WorkerProcess) -> list[int]:
    """The runs the worker started grading, in the order it took them (its "run N: stage unpack"
    lines, grader.runs.progress)."""
    order: list[int] = []
    for found in re.finditer(r"run (\d+): stage unpack", worker.log_path.read_text(errors="replace")):
        if int(found.group(1)) not in order:
            order.append(int(found.group(1)))
    return order


def _final(rig: Rig, run_ids: list[int]) -> bool:
    return all(rig.run(run_id).state.value in {"built", "scored", "failed"} for run_id in run_ids)


@pytest.mark.timeout(600)
def test_a_run_whose_worker_died_is_taken_before_the_runs_uploaded_after_it(
    settings_env: dict[str, str], standin_zip: bytes, tmp_path: Path,
) -> None:
    # A database of its own: the reconciler re-sends what it finds unsent, and the session's database
    # holds other tests' runs. No fallback re-send of the later runs (requeue_after_s): only the dead
    # worker's run is re-sent.
    with own_database(settings_env, tmp_path / "kgdata", "kg_requeue") as env:
        own = Settings.from_variables(env)
        _drill(make_rig(own, env, make_session_factory(make_engine(own)), tmp_path, requeue_after_s="900",
                        reconcile_interval_s="1"), standin_zip, tmp_path)


def _drill(rig: Rig, standin_zip: bytes, tmp_path: Path) -> None:
    sessions = rig.sessions
    queue = rig.settings.task_queue
    celery = make_celery(rig.settings)
    first, second = rig.worker("first"), rig.worker("second")
    first.start()
    try:
        with rig.client() as client:
            student = new_student(sessions, "requeued")
            interrupted = post(client, student, unique(standin_zip, "interrupted"))
            wait_for_run(client, interrupted, student, timeout=120, until=lambda r: r["state"] == "running")
            first.kill()
            later = [post(client, new_student(sessions, "later"), unique(standin_zip, f"later {i}"))
                     for i in range(LATER_UPLOADS)]
        assert queue_lengths(celery, [queue]) == {queue: LATER_UPLOADS}
        reconciler_log = tmp_path / "reconciler.log"
        with Reconciler(rig.env, reconciler_log):  # the heartbeat goes stale after 4 s
            _wait_for("the re-send", lambda: f"run {interrupted} sent to the front" in reconciler_log.read_text(),
                      timeout=60, log=reconciler_log)
        # The broker inspection sees the ordinary messages and the re-sent one (their own lists),
        # and the dead worker's unacknowledged message.
        assert queue_lengths(celery, [queue]) == {queue: LATER_UPLOADS + 1}
        held = held_runs(celery, [queue])
        assert held is not None and {interrupted, *later} <= held
        second.start()
        _wait_for("every run final", lambda: _final(rig, [interrupted, *later]), timeout=480, log=second.log_path)
    finally:
        first.stop()
        second.stop()
    assert _claim_order(second) == [interrupted, *later], second.log()
    run = rig.run(interrupted)
    graded_once(run)
    assert run.attempts == 2
    lines = reconciler_log.read_text()
    assert re.search(rf"^{TIMESTAMP} INFO grader\.runs\.reconcile: run {interrupted} sent to the front of its "
                     r"queue: its worker died \(no heartbeat\)$", lines, re.M), lines
    assert re.search(rf"^{TIMESTAMP} WARNING grader\.runs\.reconcile: runs \[{interrupted}\]: their worker stopped "
                     "beating; queued again$", lines, re.M), lines
