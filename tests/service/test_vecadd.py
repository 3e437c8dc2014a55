"""The second assignment end to end: tests/assignments/vecadd lives outside rubrics/, the
service finds it through KG_RUBRIC_DIRS alone, and an upload through the REST API is graded
by a real Celery worker to `scored`, with points, through its plug-in's CPU stage. No generic
code knows vecadd: a broken plug-in lookup leaves the run unscored and fails this test."""
from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.settings import Settings
from tests.service.conftest import WorkerProcess, auth, init_with_course, make_zip, new_student, wait_for_run

VECADD = Path(__file__).resolve().parents[1] / "assignments" / "vecadd"
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="the worker builds vecadd with nvcc")


@pytest.fixture(scope="module")
def vecadd_env(settings_env: dict[str, str]) -> dict[str, str]:
    """The shared service's variables, with vecadd's folder searched and a queue of its own
    (the session's worker was started without KG_RUBRIC_DIRS)."""
    queue = f"kg-vecadd-{uuid.uuid4().hex[:8]}"
    return {**settings_env, "KG_TASK_QUEUE": queue, "KG_SIMILARITY_QUEUE": f"{queue}-similarity",
            "KG_RUBRIC_DIRS": json.dumps([str(VECADD.parent)]), "KG_RUBRICS": json.dumps(["hw4", "vecadd"])}


@pytest.fixture(scope="module")
def vecadd_client(vecadd_env: dict[str, str], settings: Settings) -> Iterator[TestClient]:
    service = Settings.from_variables(vecadd_env, rubric_dirs=[VECADD.parent], rubrics=["hw4", "vecadd"])
    init_with_course(service, "vecadd")  # the vecadd assignment's row, from its rubric, in a course of its own
    with TestClient(create_app(service)) as client:
        yield client


@pytest.fixture(scope="module")
def vecadd_worker(vecadd_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(vecadd_env, tmp_path_factory.mktemp("vecadd-worker") / "worker.log")
    proc.start()
    yield proc
    proc.stop()


def _upload(client: TestClient, token: str, archive: Path) -> dict[str, Any]:
    with archive.open("rb") as fh:
        response = client.post("/api/v1/submissions", headers=auth(token), data={"assignment": "vecadd"},
                               files={"file": (archive.name, fh)})
    assert response.status_code == 201, response.text
    return response.json()


@pytest.mark.parametrize("body, points", [(None, 10), ("out[i] = a[i] * b[i];", 0)])
def test_vecadd_upload_is_scored_by_its_plugins_stage(
    vecadd_client: TestClient, vecadd_worker: WorkerProcess, sessions: sessionmaker[Session], tmp_path: Path,
    body: str | None, points: float,
) -> None:
    student = new_student(sessions, "vecadd")
    tag = f"// {uuid.uuid4().hex}\n"  # no build-cache hit from an earlier session
    source = (VECADD / "starter" / "src" / "vecadd.cu").read_text()
    if body is not None:
        source = source.replace("out[i] = a[i] + b[i];", body)
    archive = make_zip(VECADD / "starter", tmp_path / "vecadd.zip", {"src/vecadd.cu": tag + source})
    created = _upload(vecadd_client, student, archive)
    run = wait_for_run(vecadd_client, created["run_id"], student, timeout=180)
    assert run["state"] == "scored", (run, vecadd_worker.log())
    assert run["score"] == points
    [result] = run["results"]
    assert result["problem_id"] == "1" and result["points"] == points and result["max_points"] == 10
    assert run["stages"]["run"]["status"] == "ok" and "3 checks" in run["stages"]["run"]["log"]
    if body is None:
        assert result["status"] == "passed" and result["message"] == "full marks"
    else:  # worker.checks' message, in the assignment's words
        assert "elements out of tolerance" in result["message"] and "of out out" not in result["message"], result
        assert "(vec_add called directly)" in result["message"], result


def test_the_verdict_shows_while_speed_is_measured(
    vecadd_client: TestClient, vecadd_worker: WorkerProcess, sessions: sessionmaker[Session], tmp_path: Path,
) -> None:
    """The two-step result: once the stage has its correctness verdict and only timing is
    left (vecadd stands a 6 s wait in for a timing phase), the running run's progress already
    carries the verdict and its correctness points, "speed being measured"; the final result
    replaces it."""
    student = new_student(sessions, "vecadd")
    tag = f"// {uuid.uuid4().hex}\n"
    source = (VECADD / "starter" / "src" / "vecadd.cu").read_text()
    archive = make_zip(VECADD / "starter", tmp_path / "vecadd.zip",
                       {"src/vecadd.cu": tag + source, "timing_seconds.txt": "6"})
    created = _upload(vecadd_client, student, archive)
    running = wait_for_run(vecadd_client, created["run_id"], student, timeout=180,
                           until=lambda r: r["state"] in {"scored", "failed", "built"}
                           or bool((r.get("progress") or {}).get("checked")))
    assert running["state"] == "running", (running, vecadd_worker.log())
    assert running["progress"]["checked"] == [{"problem": "1", "correct": True, "correctness_points": 10,
                                               "correctness_max": 10, "speed": "being measured"}]
    assert running["score"] is None
    final = wait_for_run(vecadd_client, created["run_id"], student, timeout=120)
    assert final["state"] == "scored" and final["score"] == 10 and final["progress"] is None, final
