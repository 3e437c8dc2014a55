"""What a Celery worker of this service does before it takes a job, however it was started
(`grader worker`, which execs Celery, `grader dev`'s worker, or `celery -A
grader.celery_app worker`), and how it stops taking them.

- Its umask is 022 whatever it inherited (the `grader` command's 077, a systemd `UMask=0077`),
  as files it hands to the sandbox user are expected to be (the sandbox launcher,
  worker/sandbox/launcher.py, sets its own 022 for each child's fresh root besides). The worker's own files in the data dir do not depend on it: they are
  made owner-only explicitly (grader/datadir.py), the embedded broker's SQLite file included,
  here, before kombu opens it.
- Its sandbox is proven (worker/sandbox/canary.py): a canary child, started as a build's and,
  on a GPU worker, as the GPU stage's, must find its own namespaces, the syscall filter, the
  control group caps and none of the service's files. A sandbox that lacks any of it makes the
  worker exit with EXIT_BROKEN_SANDBOX, saying what is missing, unless reduced isolation was
  asked for (KG_SANDBOX_REQUIRE_NAMESPACES=false): then it takes jobs, and every run it records
  says "reduced isolation: ..." (Run.toolchain, shown to staff on the run and ops pages).
  First, since the toolchain's check builds in the sandbox.
- Its toolchain is checked (worker/toolchain.py), and each assignment's reference kit built in
  the build's sandbox (worker.pipeline.prove_kit_builds). A worker that fails says why in one log line
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
import tempfile
from pathlib import Path
from typing import Any

from celery.signals import celeryd_after_setup, worker_init

from grader.datadir import private_dir, private_file
from grader.runs.engine_config import build_policy, gpu_available, gpu_stage_config, pipeline_config
from grader.settings import Settings, get_settings
from worker.build import ToolchainFault
from worker.pipeline import prove_kit_builds
from worker.rubric import load_rubric
from worker.sandbox import SandboxError
from worker.sandbox.canary import prove_sandbox
from worker.sandbox.view import PROJECT_ROOT
from worker.telemetry import gpu_compute_capability
from worker.toolchain import check_toolchain

log = logging.getLogger(__name__)
SANDBOX_VIEW_UMASK = 0o022
EXIT_BROKEN_TOOLCHAIN = 3
EXIT_BROKEN_SANDBOX = 4
_worker_pid: int | None = None  # the Celery worker's main process (its pool's children inherit it)
_shortfall: tuple[str, ...] | None = None  # what the sandbox lacks, once proven (sandbox_shortfall)


def toolchain_check(settings: Settings) -> str:
    """The toolchain check of a worker with these settings (every assignment it grades; its GPU,
    when it grades on one), then each assignment's reference kit built in the build's sandbox
    (from the build cache once it has been): what was found. Raises ToolchainFault."""
    rubrics = [load_rubric(slug, search=settings.rubric_dirs) for slug in settings.rubrics]
    configs = [pipeline_config(settings, rubric) for rubric in rubrics]
    gpu = gpu_compute_capability(settings.gpu_index) if gpu_available(settings) else None
    found = check_toolchain([config.toolchain for config in configs], settings.cuda_arch, gpu)
    with tempfile.TemporaryDirectory(prefix="kg-toolchain-check-kits-", dir=private_dir(settings.jobs_dir)) as tmp:
        for rubric, config in zip(rubrics, configs):
            try:
                prove_kit_builds(rubric, config, Path(tmp) / rubric.slug)
            except ToolchainFault as exc:
                raise ToolchainFault(f"{rubric.slug}: {exc} (README, Deploying: the CUDA headers)") from None
            except SandboxError as exc:
                raise ToolchainFault(f"{rubric.slug}: the reference kit could not be built in the build's sandbox: "
                                     f"{exc}") from None
    return f"{found}; every assignment's reference kit builds in the sandbox"


def sandbox_shortfall(settings: Settings) -> tuple[str, ...]:
    """What this worker's sandbox lacks (empty: nothing), proven once per process by the canary
    under the build's policy and, on a GPU worker, the GPU stage's. A forked pool process
    inherits the answer its parent found before consuming."""
    global _shortfall
    if _shortfall is None:
        _shortfall = _prove_sandbox(settings)
    return _shortfall


def _prove_sandbox(settings: Settings) -> tuple[str, ...]:
    hidden = [settings.blob_dir, settings.secret_key_path, settings.embedded_database_path,
              PROJECT_ROOT / "pyproject.toml", PROJECT_ROOT / ".env"]
    policies = [build_policy(settings)]
    if gpu_available(settings):
        policies.append(gpu_stage_config(settings).policy)
    jobs = private_dir(settings.jobs_dir)
    missing = [item for policy in policies for item in prove_sandbox(policy, hidden, jobs)]
    return tuple(dict.fromkeys(missing))


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
    consumer start: a SystemExit here stops the worker with that status. The sandbox first (the
    kit's build runs in it), then the toolchain. Celery logs and forgets any other exception of
    a signal handler, so a check that breaks refuses as well: it proved nothing."""
    settings = get_settings()
    try:
        missing = sandbox_shortfall(settings)
    except Exception as exc:
        missing = (f"the canary could not be run ({type(exc).__name__}: {exc})",)
    if missing and settings.sandbox.require_namespaces:
        log.critical("this worker refuses to take jobs: its sandbox falls short: %s (KG_SANDBOX_REQUIRE_NAMESPACES="
                     "false takes jobs with this reduced isolation, shown on every run)", "; ".join(missing))
        raise SystemExit(EXIT_BROKEN_SANDBOX)
    if missing:
        log.warning("reduced isolation (KG_SANDBOX_REQUIRE_NAMESPACES=false): %s; every run says so",
                    "; ".join(missing))
    else:
        log.info("sandbox proven: namespaces, syscall filter, control group caps and view hold")
    try:
        found = toolchain_check(settings)
    except Exception as exc:
        log.critical("this worker refuses to take jobs: %s", exc if isinstance(exc, ToolchainFault) else
                     f"its toolchain check failed ({type(exc).__name__}: {exc})")
        raise SystemExit(EXIT_BROKEN_TOOLCHAIN) from None
    log.info("toolchain checked: %s", found)


def stop_taking_jobs(why: str) -> None:
    """Called when a build met a toolchain fault (the run is released): this worker finishes
    what it holds and exits (a warm shutdown of its main process)."""
    log.critical("this worker stops taking jobs: its toolchain failed during a build (%s); the run was "
                 "released for another worker", why)
    if _worker_pid is not None:
        os.kill(_worker_pid, signal.SIGTERM)
