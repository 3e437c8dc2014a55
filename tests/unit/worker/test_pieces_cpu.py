"""A grade in two pieces on the CPU stand-in (tests/fixtures/cpu_standin.py): the checks piece ends
the run `checked` with every correctness verdict and no speed, the timing piece (a second job folder,
the same archive) times only what the checks left pending and scores the whole, as one grade would."""
from __future__ import annotations

import dataclasses
import sys
import threading
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
import cpu_standin  # noqa: E402
from gpu_stage_support import MiB, base, policy, short_cases, trusted  # noqa: E402,F401  (fixtures)
from gpu_stage_support import measured as _measured  # noqa: E402
from gpu_stage_support import stage_config as _config  # noqa: E402

from rubrics.hw4.grade import run_gpu_stage  # noqa: E402
from worker.build import Toolchain  # noqa: E402
from worker.gpu.gpu_lock import GpuLock  # noqa: E402
from worker.pieces import TIMING_PENDING, pending_problems  # noqa: E402
from worker.pipeline import PipelineConfig, grade_submission, time_submission  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402
from worker.sandbox import SandboxPolicy  # noqa: E402
from worker.states import Piece, RunState  # noqa: E402
from worker.unpack import UnpackLimits  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_standin.have_compiler(), reason="g++ is needed to build the CPU stand-in kernels")


def _zip(base: Path, name: str, defines: tuple[str, ...] = ()) -> Path:
    source = cpu_standin.make_cpu_submission(base / f"{name}-source" / "llmsys_hw4", defines=defines)
    archive = base / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and path.suffix != ".so":
                zf.write(path, path.relative_to(source.parent).as_posix())
    return archive


def _stage_for(trusted: Path, policy: SandboxPolicy, piece: Piece, asked: list[tuple[str, ...]],
               lock: GpuLock | None = None, budget_s: float | None = None):
    """hw4's stage for `piece`; a timing piece's takes its turns with `lock` (the pipeline's);
    `budget_s`: the run's GPU budget (none by default)."""
    config = dataclasses.replace(_config(policy), piece=piece, gpu_lock=lock if piece is Piece.timing else None,
                                 budget_s=budget_s)

    def gpu_stage(rubric, staged: Path, reference: Path, work: Path, problems: tuple[str, ...]):
        asked.append(problems)  # the trusted stand-in plays our kit (the fake nvcc's is unusable on a CPU)
        return run_gpu_stage(rubric, staged, trusted, work, dataclasses.replace(config, problems=problems))

    return gpu_stage


def _pipeline(base: Path) -> PipelineConfig:
    nvcc = cpu_standin.write_fake_nvcc(base / "bin" / "nvcc")
    return PipelineConfig(UnpackLimits(200 * MiB, 50 * MiB, 5000, 24, 100.0),
                          Toolchain(nvcc=str(nvcc), flags=("--shared", "-Xcompiler", "-fPIC")), None, 2, 65536,
                          gpu_lock=GpuLock(base / "locks", 0))


def test_checks_then_timing_scores_the_whole(base: Path, trusted: Path, policy: SandboxPolicy,
                                             short_cases: dict) -> None:
    rubric, config, archive = load_rubric("hw4"), _pipeline(base), _zip(base, "pieces")
    asked: list[tuple[str, ...]] = []
    checked = grade_submission(archive, rubric, base / "job-checks", config,
                               gpu_stage=_stage_for(trusted, policy, Piece.checks, asked), piece=Piece.checks)
    assert checked.state == RunState.checked and checked.score is None and checked.report is None, checked.message
    assert "measured when the GPU is free" in checked.message
    measurements = [p.details["measurement"] for p in checked.problems]
    assert all(m["telemetry"].get(TIMING_PENDING) for m in measurements), measurements
    assert all("student" not in m["figures"] for m in measurements)  # nothing timed in the checks piece
    correctness = {p.problem_id: p.details["score"]["correctness_points"] for p in checked.problems}
    assert correctness == {p.id: p.scoring.correctness_points for p in rubric.problems}
    assert all(p.points == correctness[p.problem_id] for p in checked.problems)  # no speed points yet
    from worker.measurements import ProblemMeasurement
    pending = [ProblemMeasurement.from_dict(m) for m in measurements]
    assert pending_problems(pending) == tuple(p.id for p in rubric.problems)

    scored = time_submission(archive, rubric, base / "job-timing", config,
                             _stage_for(trusted, policy, Piece.timing, asked, config.gpu_lock), pending)
    assert asked == [tuple(p.id for p in rubric.problems)] * 2
    assert scored.state == RunState.scored and scored.score is not None, scored.message
    assert set(scored.stages) == {"timing_unpack", "timing_stage", "timing_build", "timing_reference", "timing_run"}
    for p in scored.problems:
        m = p.details["measurement"]
        assert p.details["score"]["correctness_points"] == correctness[p.problem_id]
        assert TIMING_PENDING not in m["telemetry"] and "timing_skipped" not in m["telemetry"], m["telemetry"]
        assert m["figures"]["student"] is not None, (p.problem_id, p.message)
        if p.problem_id != "3":  # a kernel problem keeps its checks' cases, timed in the timing piece
            assert m["cases"]["abi"] and "timing_piece" in m["telemetry"]
            assert _measured(ProblemMeasurement.from_dict(m))
    assert scored.score == pytest.approx(sum(p.points for p in scored.problems))
    assert scored.report is not None and scored.report["score"] == scored.score


def test_only_what_passed_its_checks_is_timed(base: Path, trusted: Path, policy: SandboxPolicy,
                                               short_cases: dict) -> None:
    """Softmax forward, softmax backward and LayerNorm backward broken: their problems and Problem 3
    (whose fused model runs them) keep their failed verdicts and are never timed; only 2.1 goes to
    the timing piece, and the final score keeps every checks-piece verdict."""
    rubric, config = load_rubric("hw4"), _pipeline(base)
    archive = _zip(base, "broken", ("BREAK_MASK", "CRASH_SOFTMAX_BW", "BREAK_LN_BW_GAMMA"))
    asked: list[tuple[str, ...]] = []
    checked = grade_submission(archive, rubric, base / "job-broken", config,
                               gpu_stage=_stage_for(trusted, policy, Piece.checks, asked), piece=Piece.checks)
    assert checked.state == RunState.checked, checked.message
    from worker.measurements import ProblemMeasurement
    pending = [ProblemMeasurement.from_dict(p.details["measurement"]) for p in checked.problems]
    assert pending_problems(pending) == ("2.1",)
    verdicts = {p.problem_id: (p.status, p.points) for p in checked.problems}
    scored = time_submission(archive, rubric, base / "job-broken-timing", config,
                             _stage_for(trusted, policy, Piece.timing, asked, config.gpu_lock), pending)
    assert asked[-1] == ("2.1",)
    final = {p.problem_id: p for p in scored.problems}
    for pid in ("1.1", "1.2", "2.2", "3"):
        assert (final[pid].status, final[pid].points) == verdicts[pid], final[pid].message
    assert final["2.1"].details["measurement"]["figures"]["student"] is not None


def test_a_timing_queued_behind_another_keeps_its_whole_budget(base: Path, trusted: Path, policy: SandboxPolicy,
                                                              short_cases: dict) -> None:
    """As this run's GPU stage starts, another run's timing takes the GPU alone for longer than
    this run's whole GPU budget: this run's timing piece waits for its turn, then measures every
    problem, because queueing for the lock is not the run's GPU time. (On an H100 burst of 20
    uploads, a timing queued 178 s behind others lost Problem 3, 20 points, to the 300 s budget:
    the queue decided a student's points.)"""
    rubric, config, archive = load_rubric("hw4"), _pipeline(base), _zip(base, "queued")
    assert config.gpu_lock is not None
    asked: list[tuple[str, ...]] = []
    checked = grade_submission(archive, rubric, base / "job-queued-checks", config,
                               gpu_stage=_stage_for(trusted, policy, Piece.checks, asked), piece=Piece.checks)
    assert checked.state == RunState.checked, checked.message
    from worker.measurements import ProblemMeasurement
    pending = [ProblemMeasurement.from_dict(p.details["measurement"]) for p in checked.problems]
    budget_s, held_s = 20.0, 25.0  # this stand-in's timing piece takes ~5 s of its own
    stage = _stage_for(trusted, policy, Piece.timing, asked, config.gpu_lock, budget_s)
    holding, release = threading.Event(), threading.Event()

    def other_timing() -> None:
        with config.gpu_lock.exclusive():  # type: ignore[union-attr]
            holding.set()
            release.wait(held_s)

    other = threading.Thread(target=other_timing)

    def stage_behind_another(*args):  # type: ignore[no-untyped-def]
        other.start()
        assert holding.wait(10)
        return stage(*args)

    try:
        scored = time_submission(archive, rubric, base / "job-queued-timing", config, stage_behind_another, pending)
    finally:
        release.set()
        other.join()
    assert scored.state == RunState.scored, scored.message
    for p in scored.problems:
        m = p.details["measurement"]
        assert m["status"] == "ok" and m["figures"]["student"] is not None, (p.problem_id, p.message)
        turns, budget = m["telemetry"]["gpu_turns"], m["telemetry"].get("timing_piece", m["telemetry"])["budget"]  # Problem 3: its own record
        assert turns["waited_shared"] >= held_s - 1 and budget["stage_s"] > budget_s, (turns, budget)
        assert budget["used_s"] < budget_s, budget
