"""GPU workers as Slurm jobs, on a real one-node Slurm cluster of this machine
(tests/fixtures/slurm_cluster.py: the distribution's slurmctld, slurmd and munge), with CPU
workers standing in for GPU ones (KG_GPU_GRADING=off, no gres: runs end `built`).

- A burst of uploads: `grader scale slurm --once` submits worker jobs (as many as the runs
  need, up to KG_SLURM_MAX_JOBS), every run is graded exactly once, and once the queue is empty
  the workers leave by themselves (their idle exit): squeue lists none of ours.
- A job Slurm ends mid-run (scancel: SIGTERM to every process of the job, SIGKILL after
  KillWait) loses nothing: the run is given back and sent again at once (no reconciler runs
  here), and the next job's worker grades it, once.

Skipped, saying why, where Slurm is not installed or the test is not root (.ci/run installs it).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.db import make_engine, make_session_factory
from grader.models import Run
from grader.settings import Settings
from tests.fixtures import slurm_cluster
from tests.service.conftest import (
    PROJECT_ROOT,
    drop_queues,
    make_zip,
    new_student,
    own_database,
    run_row,
    submit,
    wait_for_run,
)

KERNEL_SOURCES = ("src/combine.cu", "src/softmax_kernel.cu", "src/layernorm_kernel.cu")
IDLE_EXIT_S = 8

pytestmark = pytest.mark.skipif(slurm_cluster.why_not() is not None, reason=slurm_cluster.why_not() or "")


@pytest.fixture(scope="module")
def cluster() -> Iterator[slurm_cluster.OneNodeSlurm]:
    one = slurm_cluster.OneNodeSlurm()
    try:
        one.start()
        yield one
    finally:
        one.stop()


@pytest.fixture
def scaled(cluster: slurm_cluster.OneNodeSlurm, settings_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """A database, data dir and queue of the test's own, and the KG_SLURM_* of CPU stand-in jobs."""
    queue = f"kg-test-slurm-{uuid.uuid4().hex[:8]}"
    with own_database(settings_env, tmp_path / "kgdata", "kg_slurm", KG_TASK_QUEUE=queue,
                      KG_GPU_GRADING="off", KG_SLURM_GRES="", KG_SLURM_CPUS_PER_JOB="1",
                      KG_SLURM_PARTITION=slurm_cluster.PARTITION, KG_SLURM_TIME_LIMIT="00:15:00",
                      KG_SLURM_JOB_NAME=f"kg-test-{uuid.uuid4().hex[:6]}", KG_SLURM_IDLE_EXIT_S=str(IDLE_EXIT_S),
                      KG_SLURM_MAX_JOBS="2") as env:
        try:
            yield {**env, **cluster.env}
        finally:
            cluster.slurm(["scancel", f"--name={env['KG_SLURM_JOB_NAME']}"])
            drop_queues(queue)


def scale_once(env: dict[str, str]) -> str:
    """`grader scale slurm --once`, as cron would run it: its line."""
    done = subprocess.run([sys.executable, "-m", "grader", "scale", "slurm", "--once"], cwd=PROJECT_ROOT,
                          env={k: v for k, v in os.environ.items() if not k.startswith("KG_")} | env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stderr.strip()


def fresh_kit(kit_tree: Path, dest: Path) -> Path:
    """The reference kit with kernel sources no earlier build saw: a cold build, so a run lasts."""
    tag = f"\n// {uuid.uuid4().hex}\n"
    return make_zip(kit_tree, dest, {rel: (kit_tree / rel).read_text() + tag for rel in KERNEL_SOURCES})


def wait_until(what: str, check: object, timeout: float, logs: object) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out ({timeout} s) waiting for {what}\n{logs()}"  # type: ignore[operator]
        time.sleep(0.5)


def job_logs(data_dir: Path) -> dict[str, str]:
    """Each worker job's log (sbatch --output in the data dir), by job id."""
    return {p.stem.rsplit("-", 1)[-1]: p.read_text(errors="replace") for p in (data_dir / "slurm").glob("*.out")}


def task_results(logs: dict[str, str]) -> list[str]:
    """Every grading task's result, over every job's worker log ('done', 'stopped', ...)."""
    return re.findall(r"Task kernelgrade\.grade_run\[[^]]+\] succeeded in [0-9.]+s: '(\w+)'", "".join(logs.values()))


def _sessions(env: dict[str, str]) -> sessionmaker[Session]:
    return make_session_factory(make_engine(Settings.from_variables(env)))


@pytest.mark.timeout(420)
def test_a_burst_starts_workers_every_run_is_graded_once_and_the_workers_leave(
        cluster: slurm_cluster.OneNodeSlurm, scaled: dict[str, str], kit_tree: Path, tmp_path: Path) -> None:
    settings, sessions = Settings.from_variables(scaled), _sessions(scaled)
    name, data_dir = scaled["KG_SLURM_JOB_NAME"], Path(scaled["KG_DATA_DIR"])
    logs = lambda: f"{job_logs(data_dir)}\n{cluster.logs()}"  # noqa: E731
    archive = make_zip(kit_tree, tmp_path / "kit.zip")
    with TestClient(create_app(settings)) as client:
        students = [new_student(sessions, "slurm") for _ in range(4)]  # fair share: all four go at once
        run_ids = [submit(client, token, archive)["run_id"] for token in students]
        line = scale_once(scaled)
        assert "4 runs need a GPU; our jobs: 0 pending, 0 running; submitted 2" in line, line
        assert len(cluster.jobs(name)) == 2  # KG_SLURM_MAX_JOBS
        # the same pass again: the jobs pending or running count, nothing more is submitted
        assert "submitted 0" in scale_once(scaled)
        for run_id, token in zip(run_ids, students):
            assert wait_for_run(client, run_id, token, timeout=300)["state"] == "built", logs()
    wait_until("the workers to leave (idle exit)", lambda: not cluster.jobs(name), IDLE_EXIT_S + 60, logs)
    ran = job_logs(data_dir)
    assert len(ran) == 2 and all(f"no task for {IDLE_EXIT_S} s: this worker exits" in text for text in ran.values()), ran
    assert sorted(task_results(ran)) == ["done"] * 4  # each run graded once, by one of the two
    assert all(run_row(sessions, run_id).attempts == 1 for run_id in run_ids)
    assert "0 runs need a GPU; our jobs: 0 pending, 0 running; submitted 0" in scale_once(scaled)


@pytest.mark.timeout(420)
def test_a_job_ended_by_slurm_mid_run_loses_nothing(
        cluster: slurm_cluster.OneNodeSlurm, scaled: dict[str, str], kit_tree: Path, tmp_path: Path) -> None:
    settings, sessions = Settings.from_variables(scaled), _sessions(scaled)
    name, data_dir = scaled["KG_SLURM_JOB_NAME"], Path(scaled["KG_DATA_DIR"])
    logs = lambda: f"{job_logs(data_dir)}\n{cluster.logs()}"  # noqa: E731
    with TestClient(create_app(settings)) as client:
        token = new_student(sessions, "slurm")
        run_id = submit(client, token, fresh_kit(kit_tree, tmp_path / "fresh.zip"))["run_id"]
        assert "submitted 1" in scale_once(scaled)
        (first,) = cluster.jobs(name)
        wait_until("the run to be claimed", lambda: run_row(sessions, run_id).claimed_by is not None, 240, logs)
        time.sleep(2)  # into its build
        cluster.slurm(["scancel", first])  # SIGTERM to every process of the job; SIGKILL after KillWait
        wait_until("the cancelled job to end", lambda: first not in cluster.jobs(name), 60, logs)
        given_back = run_row(sessions, run_id)
        assert given_back.state.value == "queued" and given_back.claimed_by is None, logs()
        assert given_back.enqueued_at is not None and given_back.attempts == 0  # sent again; no attempt used
        assert task_results(job_logs(data_dir)) == ["stopped"], logs()
        assert "submitted 1" in scale_once(scaled)  # the run needs a GPU again: a new job
        assert wait_for_run(client, run_id, token, timeout=300)["state"] == "built", logs()
    wait_until("the second worker to leave", lambda: not cluster.jobs(name), IDLE_EXIT_S + 60, logs)
    assert sorted(task_results(job_logs(data_dir))) == ["done", "stopped"]  # graded once, by the second job
    final: Run = run_row(sessions, run_id)
    assert final.attempts == 1 and final.finished_at is not None
