"""What a Celery worker of this service does before it takes a job, however it was started
(`grader worker`, which execs Celery, `grader dev`'s worker, or `celery -A
grader.celery_app worker`), and how it stops taking them.

- Its umask is 022 whatever it inherited (the `grader` command's 077, a systemd `UMask=0077`),
  as files it hands to the sandbox user are expected to be (the sandbox launcher,
  worker/sandbox/launcher.py, sets its own 022 for each child's fresh root besides). The worker's own files in the data dir do not depend on it: they are
  made owner-only explicitly (grader/datadir.py), the embedded broker's SQLite file included,
  here, before kombu opens it.
- Its toolchain is checked (worker/toolchain.py). A worker that fails says why in one log line
  and exits with EXIT_BROKEN_TOOLCHAIN before it consumes anything, so every queued run stays in
  the broker for a good worker. *Why exit rather than stay up idle:* a process that is up but
  takes nothing looks healthy to every supervisor (docker, systemd) and to an operator glancing
  at it; one that exits non-zero is seen at once, and its supervisor's restarts try again once
  the toolchain is fixed.
- A worker whose toolchain fails later, during a build (worker.build.ToolchainFault), stops
  taking jobs the same way (`stop_taking_jobs`): the run was released for another worker, and
  a broken worker left consuming would take each run in turn and use up its attempts.
"""
from __future__ import annotations

import logging
import os
import signal
from typing import Any

from celery.signals import celeryd_after_setup, worker_init

from grader.datadir import private_dir, private_file
from grader.runs.engine_config import gpu_available, pipeline_config
from grader.settings import Settings, get_settings
from worker.build import ToolchainFault
from worker.rubric import load_rubric
from worker.telemetry import gpu_compute_capability
from worker.toolchain import check_toolchain

log = logging.getLogger(__name__)
SANDBOX_VIEW_UMASK = 0o022
EXIT_BROKEN_TOOLCHAIN = 3
_worker_pid: int | None = None  # the Celery worker's main process (its pool's children inherit it)


def toolchain_check(settings: Settings) -> str:
    """The toolchain check of a worker with these settings (every assignment it grades; its GPU,
    when it grades on one): what was found. Raises ToolchainFault."""
    toolchains = [pipeline_config(settings, load_rubric(slug, search=settings.rubric_dirs)).toolchain
                  for slug in settings.rubrics]
    gpu = gpu_compute_capability(settings.gpu_index) if gpu_available(settings) else None
    return check_toolchain(toolchains, settings.cuda_arch, gpu)


@worker_init.connect
def _prepare(**_: Any) -> None:
    global _worker_pid
    os.umask(SANDBOX_VIEW_UMASK)  # the pool's processes, forked later, inherit it
    settings = get_settings()
    private_dir(settings.data_dir)
    if not settings.broker_url:
        private_file(settings.embedded_broker_path)
    _worker_pid = os.getpid()


@celeryd_after_setup.connect
def _check_before_consuming(**_: Any) -> None:
    """After Celery's logging is set up (worker_init comes before it) and before its pool and
    consumer start: a SystemExit here stops the worker with that status."""
    try:
        found = toolchain_check(get_settings())
    except ToolchainFault as exc:
        log.critical("this worker refuses to take jobs: %s", exc)
        raise SystemExit(EXIT_BROKEN_TOOLCHAIN) from None
    log.info("toolchain checked: %s", found)


def stop_taking_jobs(why: str) -> None:
    """Called when a build met a toolchain fault (the run is released): this worker finishes
    what it holds and exits (a warm shutdown of its main process)."""
    log.critical("this worker stops taking jobs: its toolchain failed during a build (%s); the run was "
                 "released for another worker", why)
    if _worker_pid is not None:
        os.kill(_worker_pid, signal.SIGTERM)
