"""A real Celery worker process (`python -m tests.faults.small_worker QUEUE`) whose GPU stage is
the small CPU one of tests/fixtures/gpu_stage_support.py: two rubric cases per problem, tiny
timing shapes and Problem 3, no uid drop. The same code as production, less work, so a run is
`scored` on a CPU in seconds (with KG_GPU_GRADING=on and the stand-in's g++ "nvcc").

KG_FAULT_STOP_DB_AFTER_CLAIM (a JSON command line, e.g. PrivatePostgres.stop_argv()): the first
time this worker claims a run, the command runs right after the claim's transaction commits (the
database goes down between the saved claim and whatever the worker does next), and the worker
logs "fault: the database was stopped right after the claim of run N".
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import gpu_stage_support  # noqa: E402

import grader.runs.engine_config  # noqa: E402
import grader.runs.lifecycle  # noqa: E402
from grader.celery_app import celery  # noqa: E402
from worker.sandbox import SandboxPolicy  # noqa: E402
from worker.states import Piece


def stop_database_after_first_claim(patch: pytest.MonkeyPatch, argv: list[str]) -> None:
    claim_run = grader.runs.lifecycle.claim_run
    fired: list[int] = []

    def claim_then_fault(session: Session, run_id: int, *args: object) -> bool:
        claimed = claim_run(session, run_id, *args)  # type: ignore[arg-type]
        if claimed and not fired:
            fired.append(run_id)

            def stop(_session: Session) -> None:
                subprocess.run(argv, check=True, capture_output=True)
                logging.getLogger(__name__).warning("fault: the database was stopped right after the claim of run %s",
                                                    run_id)

            event.listen(session, "after_commit", stop, once=True)
        return claimed

    patch.setattr(grader.runs.lifecycle, "claim_run", claim_then_fault)


def main(queue: str) -> None:
    patch = pytest.MonkeyPatch()  # kept for the life of the process
    gpu_stage_support.shorten_cases(patch)
    patch.setattr(grader.runs.engine_config, "gpu_stage_config",
                  lambda _settings, piece=Piece.whole: dataclasses.replace(
                      gpu_stage_support.stage_config(SandboxPolicy(user=None)), piece=piece))
    if os.environ.get("KG_FAULT_STOP_DB_AFTER_CLAIM"):
        stop_database_after_first_claim(patch, json.loads(os.environ["KG_FAULT_STOP_DB_AFTER_CLAIM"]))
    celery.worker_main(["worker", "-Q", queue, "--concurrency", "1", "--loglevel", "info", "--without-gossip",
                        "--without-mingle", "--without-heartbeat"])


if __name__ == "__main__":
    main(sys.argv[1])
