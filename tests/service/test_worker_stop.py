"""How a worker stops (grader/runs/worker_stop.py), without a scheduler: a SIGTERM to every
process of a worker mid-run (what Slurm sends a job it ends: tests/service/test_slurm_workers.py
does it for real) gives the run back and sends it again, and the next worker grades it once; a
worker started with an idle exit leaves by itself once the queue is empty."""
from __future__ import annotations

import os
import re
import signal
import time
import uuid
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.settings import Settings
from tests.service.conftest import WorkerProcess, drop_queues, make_zip, new_student, run_row, submit, wait_for_run

KERNEL_SOURCES = ("src/combine.cu", "src/softmax_kernel.cu", "src/layernorm_kernel.cu")


def _results(worker: WorkerProcess) -> list[str]:
    return re.findall(r"Task kernelgrade\.grade_run\[[^]]+\] succeeded in [0-9.]+s: '(\w+)'",
                      worker.log_path.read_text(errors="replace"))


def _wait(what: str, check: object, timeout: float, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {worker.log()}"
        time.sleep(0.2)


def test_sigterm_to_every_process_mid_run_gives_the_run_back_and_an_idle_worker_leaves(
        settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], kit_tree: Path,
        tmp_path: Path) -> None:
    queue = f"kg-test-stop-{uuid.uuid4().hex[:8]}"
    env = {**settings_env, "KG_TASK_QUEUE": queue, "KG_GPU_GRADING": "off"}
    tag = f"\n// {uuid.uuid4().hex}\n"  # sources no build saw: a cold build, so the run lasts
    archive = make_zip(kit_tree, tmp_path / "fresh.zip", {rel: (kit_tree / rel).read_text() + tag for rel in KERNEL_SOURCES})
    first = WorkerProcess(env, tmp_path / "first.log")
    second = WorkerProcess({**env, "KG_WORKER_IDLE_EXIT_S": "3"}, tmp_path / "second.log")
    try:
        with TestClient(create_app(settings.model_copy(update={"task_queue": queue}))) as client:
            token = new_student(sessions, "stop")
            run_id = submit(client, token, archive)["run_id"]
            first.start()
            _wait("the run's build", lambda: f"run {run_id}: stage build" in first.log_path.read_text(), 120, first)
            assert first.proc is not None
            os.killpg(first.proc.pid, signal.SIGTERM)  # the worker, its pool process and the build's children
            assert first.proc.wait(timeout=60) == 0, first.log()
            back = run_row(sessions, run_id)
            assert back.state.value == "queued" and back.claimed_by is None and back.attempts == 0, first.log()
            assert back.enqueued_at is not None  # sent again by the task itself: no reconciler runs here
            assert _results(first) == ["stopped"], first.log()
            assert f"run {run_id}: this worker is being stopped (SIGTERM)" in first.log_path.read_text()
            second.start()
            assert wait_for_run(client, run_id, token)["state"] == "built", second.log()
        assert second.proc is not None
        assert second.proc.wait(timeout=60) == 0, second.log()  # its idle exit, with nothing left to do
    finally:
        first.stop()
        second.stop()
        drop_queues(queue)
    assert _results(second) == ["done"] and run_row(sessions, run_id).attempts == 1
    assert "no task for 3 s: this worker exits (idle exit)" in second.log_path.read_text()
