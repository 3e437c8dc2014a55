"""A run graded all the way to `scored` by the worker's executor, recorded in PostgreSQL and
read back over the API: the GPU stage runs on the CPU stand-in submission (host-loop kernels
built by a g++ "nvcc", the kit's MiniTorch on the CPU), since CI has no GPU."""
from __future__ import annotations

import dataclasses
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

import grader.runs.engine_config
from grader.course.counted_choice import choose
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Run
from grader.reads.grade_times import grade_seconds
from grader.reads.runstatus import progress_text, queue_estimate
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.runs.reuse import measured_cleanly
from grader.runs.timing_piece import time_if_passed_over
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from rubrics.hw4 import grade, speed
from rubrics.hw4.cases import load_cases
from rubrics.hw4.grade import GpuStageConfig
from rubrics.hw4.problem3 import Problem3Config
from tests.fixtures import cpu_standin
from tests.fixtures.small_timing import SMALL_TIMING_CASES
from tests.service.conftest import auth
from worker.sandbox import SandboxLimits, SandboxPolicy
from worker.states import Piece

GiB = 1024**3
SMALL = GpuStageConfig(
    limits=SandboxLimits(wall_s=300, cpu_s=600, memory_bytes=8 * GiB, max_processes=256, file_size_bytes=GiB),
    policy=SandboxPolicy(user=None),  # CI's interpreter lives under a 0700 home: no uid drop here
    timing=speed.TimingConfig(warmup=1, min_trials=4, max_trials=4, round_trials=4, request_ms=1.0, max_reps=2),
    problem3=Problem3Config(n_vocab=50, n_embd=16, n_head=2, n_positions=8, batch=2, seq_len=8,
                            budget_s=60, min_pairs=2, max_pairs=2),
)


@pytest.fixture
def small_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rubric cases per problem, tiny timing shapes and model: the same code, less work."""
    short = {pid: cases[:2] for pid, cases in load_cases("hw4").items()}
    monkeypatch.setattr(grade, "load_cases", lambda _slug: short)
    for pid, case in SMALL_TIMING_CASES.items():
        monkeypatch.setitem(speed.TIMING_CASES, pid, [case])
    monkeypatch.setattr(grader.runs.engine_config, "gpu_stage_config",
                        lambda _settings, piece=Piece.whole: dataclasses.replace(SMALL, piece=piece))


@pytest.fixture
def work() -> Iterator[Path]:
    path = cpu_standin.sandbox_visible_dir("kg-scored-run-")  # the sandbox user runs the fake nvcc kept here
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _upload(settings: Settings, sessions: sessionmaker[Session], work: Path, note: str = "") -> int:
    """alice's upload of the CPU stand-in (`note` changes a byte of a file the grade ignores); its run's id."""
    source = cpu_standin.make_cpu_submission(work / f"src{note}" / "llmsys_hw4")
    (source / "NOTES.txt").write_text(note)
    archive = work / f"standin{note}.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and path.suffix != ".so":
                zf.write(path, path.relative_to(source.parent).as_posix())
    blob = BlobStore(settings.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        user = get_or_create_user(session, "alice", Role.student)
        _, run = record_submission(session, user, get_assignment(session, "hw4"), archive.name, blob)
        return run.id


def _gpu_settings(settings: Settings, work: Path, timing_split: bool) -> Settings:
    """A GPU worker's settings whose "GPU" is the CPU stand-in, with the blobs uploaded so far."""
    gpu_settings = settings.model_copy(update={
        "gpu_grading": "on", "nvcc": str(cpu_standin.write_fake_nvcc(work / "bin" / "nvcc")),
        "data_dir": work / "data", "timing_split": timing_split,
    })
    shutil.rmtree(gpu_settings.blob_dir, ignore_errors=True)
    gpu_settings.blob_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(settings.blob_dir, gpu_settings.blob_dir)
    return gpu_settings


@pytest.mark.skipif(not cpu_standin.have_compiler(), reason="needs g++ for the CPU stand-in")
def test_executor_scores_a_run_and_the_api_shows_results_and_report(
    settings: Settings, sessions: sessionmaker[Session], client: TestClient, tokens: dict[str, str],
    small_stage: None, work: Path,
) -> None:
    run_id = _upload(settings, sessions, work)
    gpu_settings = _gpu_settings(settings, work, timing_split=False)  # one task grades the whole run

    assert RunExecutor(gpu_settings, sessions, BlobStore(gpu_settings.blob_dir)).execute(run_id) is Disposition.done

    run = client.get(f"/api/v1/runs/{run_id}", headers=auth(tokens["alice"])).json()
    assert run["state"] == "scored", run["message"]
    assert set(run["stages"]) >= {"unpack", "stage", "build", "reference", "run"}
    assert [r["problem_id"] for r in run["results"]] == ["1.1", "1.2", "2.1", "2.2", "3"]
    assert run["score"] == pytest.approx(sum(r["points"] for r in run["results"]))
    for result in run["results"]:
        assert result["details"]["score"]["correctness_points"] == 14, result
        assert result["details"]["measurement"]["status"] == "ok"
    assert run["report"]["score"] == run["score"]
    assert [t["number"] for t in run["report"]["tests"]] == ["1.1", "1.2", "2.1", "2.2", "3"]
    assert run["toolchain"]["targets_calibrated"] is False
    # Staff of the course read where the GPU stage's time went, from the stage's own record; its
    # rows that take a share of the stage's wall time add up to it. The student does not.
    gpu_time = client.get(f"/api/v1/runs/{run_id}", headers=auth(tokens["staff"])).json()["gpu_time"]
    assert gpu_time["problems"] == ["1.1", "1.2", "2.1", "2.2", "3"] and gpu_time["stage_s"] > 0
    assert {"child start", "timing", "Problem 3 timed steps"} <= {r["phase"] for r in gpu_time["rows"]}
    assert set(gpu_time["loads"]) >= {"minitorch"}
    shares = [r["run_s"] for r in gpu_time["rows"] if r["run_s"] is not None]
    assert sum(shares) == pytest.approx(gpu_time["stage_s"], abs=0.6) and min(shares) >= 0
    assert run["gpu_time"] is None


@pytest.mark.skipif(not cpu_standin.have_compiler(), reason="needs g++ for the CPU stand-in")
def test_a_split_grade_shows_verdicts_first_then_the_score(
    settings: Settings, sessions: sessionmaker[Session], client: TestClient, tokens: dict[str, str],
    small_stage: None, work: Path,
) -> None:
    run_id = _upload(settings, sessions, work)
    executor = RunExecutor(_gpu_settings(settings, work, timing_split=True), sessions, BlobStore(work / "data" / "blobs"))
    assert executor.execute(run_id) is Disposition.done and executor.timing_due(run_id)

    run = client.get(f"/api/v1/runs/{run_id}", headers=auth(tokens["alice"])).json()
    assert run["state"] == "checked" and run["score"] is None and run["report"] is None, run["message"]
    assert "measured when the GPU is free" in run["message"]
    assert [r["details"]["score"]["correctness_points"] for r in run["results"]] == [14] * 5
    assert all(r["details"]["measurement"]["figures"] == {} for r in run["results"])  # none measured yet
    assert executor.execute(run_id) is Disposition.skipped  # a second grade task finds it checked: no double grade

    assert executor.execute_timing(run_id) is Disposition.done
    run = client.get(f"/api/v1/runs/{run_id}", headers=auth(tokens["alice"])).json()
    assert run["state"] == "scored" and not executor.timing_due(run_id), run["message"]
    assert {"run", "timing_run", "timing_build"} <= set(run["stages"])  # the checks' record stays beside the timing's
    assert run["score"] == pytest.approx(sum(r["points"] for r in run["results"]))
    assert all(r["details"]["measurement"]["figures"]["student"] is not None for r in run["results"])
    assert run["score"] > 5 * 14, run["results"]  # speed points came with the timing
    assert executor.execute_timing(run_id) is Disposition.skipped  # scored: nothing left to time
    held = sum(stage["seconds"] for stage in run["stages"].values())  # both pieces, not the wait between them
    with session_scope(sessions) as session:
        assert any(abs(seconds - held) < 1e-6 for seconds in grade_seconds(session, 50)), held
    # the next upload's page gives two waits: its verdicts, then its score after the timings
    waiting = _upload(settings, sessions, work, note="waiting")
    with session_scope(sessions) as session:
        queued = session.get(Run, waiting)
        assert queued is not None
        queued.enqueued_at = queued.submission.uploaded_at
        session.flush()
        estimate = queue_estimate(session, queued, 20, settings.rubric_dirs, slots=3)
        assert estimate is not None and estimate.verdict_eta_s is not None and estimate.eta_s is not None
        assert 0 < estimate.verdict_eta_s < estimate.eta_s
        assert "estimated correctness verdicts in" in progress_text(queued, estimate)
        whole = queue_estimate(session, queued, 20, settings.rubric_dirs)  # workers not split: one wait
        assert whole is not None and whole.verdict_eta_s is None
        session.delete(queued)


@pytest.mark.skipif(not cpu_standin.have_compiler(), reason="needs g++ for the CPU stand-in")
def test_an_upload_passed_over_is_timed_once_chosen_to_count(
    settings: Settings, sessions: sessionmaker[Session], client: TestClient, tokens: dict[str, str],
    small_stage: None, work: Path,
) -> None:
    first = _upload(settings, sessions, work, note="first")
    executor = RunExecutor(_gpu_settings(settings, work, timing_split=True), sessions, BlobStore(work / "data" / "blobs"))
    assert executor.execute(first) is Disposition.done
    _upload(settings, sessions, work, note="second")  # before the first's timing began
    executor = RunExecutor(_gpu_settings(settings, work, timing_split=True), sessions, BlobStore(work / "data" / "blobs"))

    assert executor.execute_timing(first) is Disposition.done
    run = client.get(f"/api/v1/runs/{first}", headers=auth(tokens["alice"])).json()
    assert run["state"] == "scored" and run["score"] == 5 * 14, run["results"]  # correctness stays, no speed
    assert all("uploaded again" in r["message"] for r in run["results"]), [r["message"] for r in run["results"]]
    assert "timing_run" not in run["stages"]
    with session_scope(sessions) as session:  # a later identical upload must not reuse a run never timed
        assert not measured_cleanly(session.get(Run, first))

    # Chosen to count, as the counted-run routes do (grader.api.counted): the send is recorded here
    # rather than published to the session's queue, where another test's CPU worker may listen.
    sent: list[int] = []
    with session_scope(sessions) as session:
        run_row = session.get(Run, first)
        assert run_row is not None
        staff = get_or_create_user(session, "staff", Role.instructor)
        choose(session, run_row.submission.assignment, run_row.submission.user_id, run_row, staff, "the student asked")
        time_if_passed_over(session, run_row, sent.append)
    assert sent == [first]
    run = client.get(f"/api/v1/runs/{first}", headers=auth(tokens["alice"])).json()
    assert run["state"] == "checked" and run["score"] is None  # its timing comes next
    assert executor.execute_timing(first) is Disposition.done
    run = client.get(f"/api/v1/runs/{first}", headers=auth(tokens["alice"])).json()
    assert run["state"] == "scored" and run["score"] > 5 * 14 and "timing_run" in run["stages"], run["message"]
