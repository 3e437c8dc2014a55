"""The queue layout with real worker processes, started the way docker-compose.yml starts them
(`grader worker`, configured only by KG_* variables and CUDA_VISIBLE_DEVICES).

- Two GPU workers pinned to different devices consume one queue named by the GPU model, and
  both take runs: adding a GPU is adding a process, not code. (No GPU here: the devices are
  simulated by the variables alone; the workers end runs `built`.)
- With a build queue, a CPU worker compiles the run first and the run queue's worker finds
  every kernel in the shared build cache.
"""
from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.celery_app import PRIORITY_ORDINARY, PRIORITY_RESENT, make_celery
from grader.runs.dispatch import run_signature
from grader.settings import Settings
from tests.service.conftest import (
    PROJECT_ROOT,
    WorkerProcess,
    drop_queues,
    make_zip,
    new_student,
    queued_messages,
    submit,
    wait_for_run,
)

GRADER = Path(sys.executable).with_name("grader")
KERNEL_SOURCES = ("src/combine.cu", "src/softmax_kernel.cu", "src/layernorm_kernel.cu")


class GraderWorker(WorkerProcess):
    """`grader worker`: the production command, which picks its queue from the settings."""

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([str(GRADER), "worker"], cwd=PROJECT_ROOT, env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while " ready." not in self.log_path.read_text(errors="replace"):
            assert self.proc is not None and self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, f"worker not ready in {timeout} s: {self.log()}"
            time.sleep(0.2)


@contextmanager
def workers(envs: list[dict[str, str]], tmp_path: Path) -> Iterator[list[GraderWorker]]:
    started = [GraderWorker(env, tmp_path / f"worker-{i}.log") for i, env in enumerate(envs)]
    try:
        for w in started:
            w.start()
        for w in started:
            w.wait_ready()
        yield started
    finally:
        for w in started:
            w.stop()


def _without_queue(settings_env: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in settings_env.items() if k != "KG_TASK_QUEUE"}
    return {**env, "KG_GPU_GRADING": "off", **extra}


def _fresh_kit_zip(kit_tree: Path, dest: Path) -> Path:
    """The reference kit with kernel sources no earlier build saw (a cold build cache)."""
    tag = f"\n// {uuid.uuid4().hex}\n"
    return make_zip(kit_tree, dest, {rel: (kit_tree / rel).read_text() + tag for rel in KERNEL_SOURCES})


def _runs_graded(worker: GraderWorker) -> set[int]:
    return {int(m) for m in re.findall(r"run (\d+): stage unpack", worker.log_path.read_text(errors="replace"))}


def test_two_gpu_workers_on_one_model_queue_both_take_runs(
    settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session],
    kit_tree: Path, tmp_path: Path,
) -> None:
    model = f"Simulated GPU {uuid.uuid4().hex[:6]}"
    queue = Settings(_env_file=None, gpu_model=model).task_queue  # type: ignore[call-arg]
    assert queue.startswith("gpu-simulated-gpu-")
    envs = [_without_queue(settings_env, KG_GPU_MODEL=model, CUDA_VISIBLE_DEVICES=dev, KG_GPU_INDEX=dev)
            for dev in ("0", "1")]
    archive = make_zip(kit_tree, tmp_path / "kit.zip")
    try:
        with workers(envs, tmp_path) as (first, second), \
                TestClient(create_app(settings.model_copy(update={"task_queue": queue}))) as client:
            students = [new_student(sessions, "queues") for _ in range(4)]  # fair share: all four go at once
            run_ids = [submit(client, token, archive)["run_id"] for token in students]
            for run_id, token in zip(run_ids, students):
                assert wait_for_run(client, run_id, token)["state"] == "built"
    finally:
        drop_queues(queue)
    for w in (first, second):  # the queue came from KG_GPU_MODEL alone (celery's banner)
        assert f".> {queue} " in w.log_path.read_text(), w.log()
    # Each worker logs the runs it grades (grader.runs.lifecycle: "run N: stage ..."), in its own log.
    graded = {w.env["CUDA_VISIBLE_DEVICES"]: _runs_graded(w) for w in (first, second)}
    assert graded["0"] and graded["1"], graded
    assert graded["0"].isdisjoint(graded["1"]) and graded["0"] | graded["1"] == set(run_ids), graded


def test_cpu_build_queue_hands_kernels_to_the_run_queue_through_the_build_cache(
    settings: Settings, settings_env: dict[str, str], sessions: sessionmaker[Session], kit_tree: Path,
    tmp_path: Path,
) -> None:
    student = new_student(sessions)  # nothing of theirs in flight: fair share sends the upload at once
    run_queue, build_queue = f"kg-test-run-{uuid.uuid4().hex[:8]}", f"kg-test-build-{uuid.uuid4().hex[:8]}"
    builder = _without_queue(settings_env, KG_TASK_QUEUE=build_queue, KG_BUILD_QUEUE=build_queue)
    gpu = _without_queue(settings_env, KG_TASK_QUEUE=run_queue, KG_BUILD_QUEUE=build_queue)
    own = settings.model_copy(update={"task_queue": run_queue,
                                      "build": settings.build.model_copy(update={"queue": build_queue})})
    try:
        with workers([builder, gpu], tmp_path) as (build_worker, gpu_worker), \
                TestClient(create_app(own)) as client:
            run_id = submit(client, student, _fresh_kit_zip(kit_tree, tmp_path / "fresh.zip"))["run_id"]
            run = wait_for_run(client, run_id, student)
    finally:
        drop_queues(run_queue, build_queue)
    assert run["state"] == "built", run
    assert f"prebuild of run {run_id}: built" in build_worker.log_path.read_text()
    # Every kernel came from the cache the build worker filled: the run's worker ran no nvcc.
    cached = run["toolchain"]["build_cached"]
    assert cached and all(cached.values()), (cached, gpu_worker.log())


def test_a_resent_run_stays_in_front_after_its_prebuild(settings: Settings, settings_env: dict[str, str],
                                                       tmp_path: Path) -> None:
    """The build worker sends a chain's grading task on to the run queue at the priority its link
    was given (grader.runs.dispatch.run_signature): a re-sent run is in front there too, an
    ordinary one is not. (The runs do not exist: the prebuild skips them and the chain goes on,
    as it always does.)"""
    run_queue, build_queue = f"kg-test-run-{uuid.uuid4().hex[:8]}", f"kg-test-build-{uuid.uuid4().hex[:8]}"
    builder = _without_queue(settings_env, KG_TASK_QUEUE=build_queue, KG_BUILD_QUEUE=build_queue)
    own = settings.model_copy(update={"task_queue": run_queue,
                                      "build": settings.build.model_copy(update={"queue": build_queue})})
    celery = make_celery(own)
    ordinary, resent = 930_000_001, 930_000_002
    try:
        with workers([builder], tmp_path):
            run_signature(celery, ordinary, run_queue).apply_async()
            run_signature(celery, resent, run_queue, resent=True).apply_async()
            deadline = time.monotonic() + 60
            while len(waiting := queued_messages(run_queue)) < 2:
                assert time.monotonic() < deadline, f"the prebuilds did not send the runs on: {waiting}"
                time.sleep(0.2)
    finally:
        drop_queues(run_queue, build_queue)
    assert [json.loads(base64.b64decode(m["body"]))[0] for m in waiting] == [[resent], [ordinary]]
    assert [m["properties"]["priority"] for m in waiting] == [PRIORITY_RESENT, PRIORITY_ORDINARY]
