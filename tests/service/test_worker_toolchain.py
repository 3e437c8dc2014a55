"""Toolchain faults are never the student's (issue 36), with real Celery worker processes:
a worker started without a usable nvcc refuses to take jobs (one log line, exit status 3) and the
run queued meanwhile waits in the broker until a good worker grades it; a toolchain that fails
during a build releases the run (an infrastructure fault, retried elsewhere), stops the worker,
and after the last attempt the run fails `infra_error` saying it is not the student's fault."""
from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.celery_app import make_celery
from grader.db import make_engine, make_session_factory
from grader.models import RunState
from grader.runs.reconcile import reconcile
from grader.runs.worker_start import EXIT_BROKEN_TOOLCHAIN
from grader.settings import Settings
from tests.fixtures import cpu_standin
from tests.service.conftest import (
    WorkerProcess,
    drop_queues,
    make_zip,
    new_student,
    own_database,
    queued_messages,
    run_row,
    submit,
    wait_for_run,
)

# An nvcc that works for the worker's start check (which builds our probe in a folder named
# kg-toolchain-check-*) and then fails on everything, as a toolkit removed or broken under a
# running worker does.
BREAKS_AFTER_THE_CHECK = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "kernelgrade test nvcc, release 0.0, V0.0"; exit 0; fi
case "$(pwd -P)" in
  *kg-toolchain-check-*)
    out=""; prev=""
    for a; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
    exec g++ -shared -fPIC -x c++ /dev/null -o "$out";;
esac
echo "nvcc fatal   : Unsupported gpu architecture 'compute_90'"
exit 1
"""


@pytest.fixture
def own_queue(settings_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """The session's worker settings on a queue and a database of their own: the session's worker
    never sees the queue, and a reconcile pass here resends only this test's runs (on the shared
    database it sent other tests' queued runs into this queue, and the worker took one of those)."""
    queue = f"{settings_env['KG_TASK_QUEUE']}-toolchain-{uuid.uuid4().hex[:6]}"
    with own_database(settings_env, tmp_path / "kgdata", "kg_toolchain", KG_TASK_QUEUE=queue) as env:
        yield env
    drop_queues(queue)


@pytest.fixture
def own_sessions(own_queue: dict[str, str]) -> sessionmaker[Session]:
    return make_session_factory(make_engine(Settings.from_variables(own_queue)))


def _refusals(worker: WorkerProcess, words: str) -> list[str]:
    return [line for line in worker.log_path.read_text(errors="replace").splitlines() if words in line]


@pytest.mark.timeout(900)
def test_a_worker_without_nvcc_refuses_and_the_queued_run_waits_for_a_good_worker(
    own_queue: dict[str, str], own_sessions: sessionmaker[Session], kit_tree: Path, tmp_path: Path,
) -> None:
    own = Settings.from_variables(own_queue)
    student = new_student(own_sessions, "toolchain-wait")
    missing = tmp_path / "no-cuda" / "bin" / "nvcc"
    with TestClient(create_app(own)) as client:
        run_id = submit(client, student, make_zip(kit_tree, tmp_path / "kit.zip"))["run_id"]
        bad = WorkerProcess({**own_queue, "KG_NVCC": str(missing)}, tmp_path / "bad-worker.log")
        bad.start()
        assert bad.proc is not None and bad.proc.wait(timeout=180) == EXIT_BROKEN_TOOLCHAIN, bad.log()
        (line,) = _refusals(bad, "refuses to take jobs")
        assert line.endswith(f"this worker refuses to take jobs: nvcc not found or not runnable: {missing} (KG_NVCC)")
        waiting = run_row(own_sessions, run_id)
        assert (waiting.state, waiting.attempts) == (RunState.queued, 0), "the refusing worker touched the run"
        assert len(queued_messages(own.task_queue)) == 1, "the run's message is no longer queued"
        good = WorkerProcess(own_queue, tmp_path / "good-worker.log")
        good.start()
        try:
            run = wait_for_run(client, run_id, student, timeout=600)
        finally:
            good.stop()
    assert run["state"] == "built" and run["error_class"] is None, run
    assert run_row(own_sessions, run_id).attempts == 1
    assert "toolchain checked: nvcc" in good.log_path.read_text(errors="replace")


@pytest.mark.timeout(900)
def test_a_toolchain_fault_during_a_build_is_an_infra_error_after_its_retries(
    own_queue: dict[str, str], own_sessions: sessionmaker[Session], kit_tree: Path, tmp_path: Path,
) -> None:
    folder = cpu_standin.sandbox_visible_dir("kg-broken-nvcc-")  # the build's sandbox must run it
    try:
        nvcc = folder / "nvcc"
        nvcc.write_text(BREAKS_AFTER_THE_CHECK)
        nvcc.chmod(0o755)
        env = {**own_queue, "KG_NVCC": str(nvcc), "KG_MAX_ATTEMPTS": "2"}
        own = Settings.from_variables(env)
        student = new_student(own_sessions, "toolchain-fault")
        # Sources of its own: the worker's start check built the kit's (this nvcc "builds" there),
        # and the build cache would hand those to an unchanged kit
        tree = tmp_path / "tree"
        shutil.copytree(kit_tree, tree)
        with (tree / "src" / "softmax_kernel.cu").open("a") as source:
            source.write("\n// changed\n")
        with TestClient(create_app(own)) as client:
            run_id = submit(client, student, make_zip(tree, tmp_path / "kit.zip"))["run_id"]
            workers = []
            for attempt in (1, 2):
                worker = WorkerProcess(env, tmp_path / f"worker-{attempt}.log")
                workers.append(worker)
                worker.start()
                try:  # it takes the run, meets the fault, releases or fails the run, and stops itself
                    assert worker.proc is not None and worker.proc.wait(timeout=300) is not None
                finally:
                    worker.stop()
                assert _refusals(worker, "this worker stops taking jobs: its toolchain failed during a build (our "
                                         "own probe source does not build with this toolchain either: nvcc fatal"), \
                    worker.log()
                if attempt == 1:
                    released = run_row(own_sessions, run_id)
                    assert (released.state, released.attempts) == (RunState.queued, 1), released.message
                    reconcile(own, own_sessions, make_celery(own))  # as the reconciler would, if the retry's message was lost
            run = wait_for_run(client, run_id, student, timeout=60)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert run["state"] == "failed" and run["error_class"] == "infra_error", run
    assert "this is not a problem with your code" in run["message"], run["message"]
    assert "the grading machine's CUDA toolchain failed" in run["message"], run["message"]
    assert run["score"] is None and run_row(own_sessions, run_id).attempts == 2
    assert all(r["points"] == 0 for r in run["results"])
