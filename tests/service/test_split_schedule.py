"""Correctness first, speed when the GPU is free (issue 55), through the real service: uploads made
while no worker runs are graded by one Celery worker (Redis priorities, the small CPU GPU stage of
tests/faults/small_worker.py) checks piece first for every upload, then each run's timing, in the
order their checks ended; every run ends scored with its checks' record beside its timing's.

Real parts: Redis (a queue of this test's own), PostgreSQL, a Celery worker process."""
from __future__ import annotations

import re
import time
from pathlib import Path

from grader.db import make_engine, make_session_factory
from grader.settings import Settings
from tests.service.conftest import new_student, own_database
from tests.service.test_faults import (  # noqa: F401  (fixtures)
    graded_once,
    make_rig,
    post,
    pytestmark,
    standin_zip,
    unique,
)

UPLOADS = 3


def _pieces(log: str) -> list[tuple[str, int]]:
    """(piece, run id) in the order the worker started them: a checks piece says "stage unpack" first,
    its timing piece a second time."""
    seen: list[tuple[str, int]] = []
    for found in re.finditer(r"run (\d+): stage unpack", log):
        run_id = int(found.group(1))
        seen.append(("timing" if ("checks", run_id) in seen else "checks", run_id))
    return seen


def test_every_uploads_checks_come_before_any_timing(settings_env: dict[str, str], standin_zip: bytes,
                                                     tmp_path: Path) -> None:
    with own_database(settings_env, tmp_path / "kgdata", "kg_split") as env:
        own = Settings.from_variables(env)
        rig = make_rig(own, env, make_session_factory(make_engine(own)), tmp_path)
        assert rig.settings.timing_split  # the default
        worker = rig.worker("split")
        with rig.client() as client:
            runs = [post(client, new_student(rig.sessions, "split"), unique(standin_zip, f"upload {i}"))
                    for i in range(UPLOADS)]
        worker.start()
        try:
            deadline = time.monotonic() + 480
            while not all(rig.run(r).state.value in {"scored", "failed", "built"} for r in runs):
                assert time.monotonic() < deadline, worker.log()
                time.sleep(0.5)
        finally:
            worker.stop()
        log = worker.log_path.read_text(errors="replace")
        assert _pieces(log) == [("checks", r) for r in runs] + [("timing", r) for r in runs], log[-4000:]
        for run_id in runs:
            run = rig.run(run_id)
            graded_once(run)
            assert {"run", "timing_run"} <= set(run.stages or {}), run.stages
            assert all(r.details and r.details["measurement"]["figures"]["student"] is not None for r in run.results)
