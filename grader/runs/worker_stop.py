"""How a worker stops without losing or double-grading a run: its idle exit, and a SIGTERM to the
process that is grading (what Slurm sends every process of a job it ends).

- Idle exit (KG_WORKER_IDLE_EXIT_S, `grader worker --idle-exit`): the worker's main process
  watches Celery's own books of the requests it holds (received, running, waiting for their
  countdown); once it has held none for that long it sends itself SIGTERM, Celery's warm
  shutdown. A message that arrives meanwhile is not acknowledged (late acks), so the broker gives
  it to another worker.
- SIGTERM to the main process alone (docker stop, systemd, Kubernetes, the GPU supervisor, the idle
  exit): Celery's warm shutdown; the run under way is finished and recorded. Nothing here changes it.
- SIGTERM to the pool process running a run (Slurm's scancel, its time limit, preemption: every
  process of the job gets it, the sandboxed children too, then SIGKILL after the cluster's
  KillWait): the grade cannot be trusted any more (its children were killed under it), so the
  task stops at once (`WorkerStopping`, raised in the grading thread), the executor gives the run
  back (queued, its claim cleared: grader.runs.lifecycle) and the task sends it again at the front
  of its queue; the task then ends normally and its message is acknowledged, so the run is
  neither lost nor graded twice. A send that fails leaves it to the reconciler (never sent). A
  pool process that is not running a task exits as before.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from celery.signals import worker_ready
from celery.worker import state as worker_state

from grader.settings import get_settings

log = logging.getLogger(__name__)
IDLE_POLL_S = 1.0
_stop_asked = threading.Event()  # this process got SIGTERM during its task


class WorkerStopping(BaseException):
    """SIGTERM reached the process grading a run: stop now and give the run back. A BaseException,
    so no `except Exception` on the way (the pipeline's, the sandbox's) takes it for a fault of the
    submission."""


def stop_asked() -> bool:
    """Whether this process was told to stop: an outcome graded after it is not recorded."""
    return _stop_asked.is_set()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if not _stop_asked.is_set():  # the first: stop; a second changes nothing (the run is being given back)
        _stop_asked.set()
        raise WorkerStopping("SIGTERM: the job is being ended; the run goes back to the queue")


@contextmanager
def stops_on_sigterm() -> Iterator[None]:
    """A task's span: a SIGTERM within it raises WorkerStopping in this (the grading) thread.
    Outside it the process's own handler stands (a pool process's: billiard's, which exits)."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    _stop_asked.clear()  # a process that was stopped between tasks has exited: this is a new task
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _held_requests() -> int:
    return len(worker_state.requests) + len(worker_state.scheduled_requests)


def watch_idle(idle_s: float, pid: int, poll_s: float = IDLE_POLL_S) -> None:
    """Until `pid` has been sent SIGTERM: every `poll_s`, note whether the worker holds a request;
    once it has held none for `idle_s`, ask it to stop (warm shutdown)."""
    last_busy = time.monotonic()
    while True:
        time.sleep(poll_s)
        if _held_requests():
            last_busy = time.monotonic()
        elif time.monotonic() - last_busy >= idle_s:
            log.info("no task for %g s: this worker exits (idle exit)", idle_s)
            os.kill(pid, signal.SIGTERM)
            return


@worker_ready.connect
def _start_idle_watch(**_: Any) -> None:
    idle_s = get_settings().worker_idle_exit_s
    if idle_s > 0:
        log.info("this worker exits after %g s without a task", idle_s)
        threading.Thread(target=watch_idle, args=(idle_s, os.getpid()), daemon=True, name="idle-exit").start()
