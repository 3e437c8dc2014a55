"""A real Celery worker process (`python -m tests.faults.small_worker QUEUE`) whose GPU stage is
the small CPU one of tests/fixtures/gpu_stage_support.py: two rubric cases per problem, tiny
timing shapes and Problem 3, no uid drop. The same code as production, less work, so a run is
`scored` on a CPU in seconds (with KG_GPU_GRADING=on and the stand-in's g++ "nvcc").
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import gpu_stage_support  # noqa: E402

import grader.runs.engine_config  # noqa: E402
from grader.runs.celery_app import celery  # noqa: E402
from worker.sandbox import SandboxPolicy  # noqa: E402


def main(queue: str) -> None:
    patch = pytest.MonkeyPatch()  # kept for the life of the process
    gpu_stage_support.shorten_cases(patch)
    patch.setattr(grader.runs.engine_config, "gpu_stage_config",
                  lambda _settings: gpu_stage_support.stage_config(SandboxPolicy(user=None)))
    celery.worker_main(["worker", "-Q", queue, "--concurrency", "1", "--loglevel", "info", "--without-gossip",
                        "--without-mingle", "--without-heartbeat"])


if __name__ == "__main__":
    main(sys.argv[1])
