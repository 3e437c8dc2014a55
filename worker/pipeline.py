"""The grading pipeline: unpack -> stage -> build -> (GPU stages) -> report.

Plain Python with no Celery and no database: given an archive, a rubric and a job folder it
returns an Outcome. The Celery task (worker.tasks) and the run bookkeeping (worker.runs)
wrap it.
"""
from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.states import ErrorClass, RunState
from worker.build import BuildResult, Toolchain, build_kernels, nvcc_version
from worker.rubric import Rubric
from worker.stage import stage_submission
from worker.unpack import BadArchive, UnpackLimits, find_assignment_root, unpack_zip

NO_GPU_STAGE_MESSAGE = (
    "Build succeeded. GPU grading (correctness, timing, score) is not available on this "
    "worker yet, so no score was given."
)


@dataclass(frozen=True)
class PipelineConfig:
    limits: UnpackLimits
    toolchain: Toolchain
    build_cache_dir: Path | None
    build_jobs: int
    log_limit_bytes: int


@dataclass
class StageRecord:
    status: str  # ok | failed
    seconds: float
    log: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "seconds": round(self.seconds, 3), "log": self.log}


@dataclass
class ProblemOutcome:
    problem_id: str
    title: str
    status: str  # passed | failed | not_run
    points: float
    max_points: float
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    state: RunState
    error_class: ErrorClass | None = None
    message: str = ""
    score: float | None = None
    stages: dict[str, StageRecord] = field(default_factory=dict)
    toolchain: dict[str, Any] = field(default_factory=dict)
    problems: list[ProblemOutcome] = field(default_factory=list)


StageListener = Callable[[str], None]


def _truncate(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    head = data[: limit // 2].decode(errors="ignore")
    tail = data[-limit // 2 :].decode(errors="ignore")
    return f"{head}\n... [{len(data) - limit} bytes cut] ...\n{tail}"


def _first_error_line(log: str) -> str:
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip()
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no compiler output"


def _build_log(results: list[BuildResult]) -> str:
    parts = []
    for r in results:
        status = "cached" if r.cached else ("ok" if r.ok else "FAILED")
        parts.append(f"== {r.name} ({status}, {r.seconds:.1f} s)\n$ {' '.join(r.command)}\n{r.log}")
    return "\n".join(parts)


def toolchain_info(toolchain: Toolchain) -> dict[str, Any]:
    return {
        "nvcc": nvcc_version(toolchain.nvcc),
        "nvcc_flags": list(toolchain.flags),
        "python": sys.version.split()[0],
        "host": platform.node(),
    }


def not_run_problems(rubric: Rubric, message: str) -> list[ProblemOutcome]:
    return [ProblemOutcome(p.id, p.title, "not_run", 0.0, p.points, message) for p in rubric.problems]


def grade_submission(
    archive: Path,
    rubric: Rubric,
    job_dir: Path,
    config: PipelineConfig,
    on_stage: StageListener = lambda _stage: None,
) -> Outcome:
    """Run every stage for one archive in the fresh folder `job_dir`."""
    outcome = Outcome(state=RunState.building, toolchain=toolchain_info(config.toolchain))
    limit = config.log_limit_bytes

    on_stage("unpack")
    started = time.monotonic()
    try:
        unpacked = unpack_zip(archive, job_dir / "upload", config.limits)
        student_root = find_assignment_root(job_dir / "upload", rubric.required_files)
    except BadArchive as exc:
        outcome.stages["unpack"] = StageRecord("failed", time.monotonic() - started, str(exc))
        return _failed(outcome, rubric, ErrorClass.bad_archive, str(exc))
    where = student_root.relative_to(job_dir / "upload").as_posix()
    outcome.stages["unpack"] = StageRecord(
        "ok", time.monotonic() - started,
        f"{unpacked.files} files, {unpacked.total_bytes} bytes; assignment folder: {where}",
    )

    on_stage("stage")
    started = time.monotonic()
    staged = stage_submission(student_root, rubric, job_dir / "staged")
    ignored = ", ".join(staged.ignored[:20]) + (" ..." if len(staged.ignored) > 20 else "")
    outcome.stages["stage"] = StageRecord(
        "ok", time.monotonic() - started,
        _truncate(f"taken from the submission: {', '.join(staged.taken)}\nignored: {ignored or 'nothing'}", limit),
    )

    on_stage("build")
    started = time.monotonic()
    results = build_kernels(
        staged.root, list(rubric.kernels), config.toolchain, config.build_cache_dir, config.build_jobs
    )
    failed = [r for r in results if not r.ok]
    outcome.stages["build"] = StageRecord(
        "failed" if failed else "ok", time.monotonic() - started, _truncate(_build_log(results), limit)
    )
    outcome.toolchain["build_seconds"] = {r.name: round(r.seconds, 2) for r in results}
    outcome.toolchain["build_cached"] = {r.name: r.cached for r in results}
    if failed:
        first = failed[0]
        message = f"{first.name} did not compile: {_first_error_line(first.log)}"
        if len(failed) > 1:
            message += f" (and {len(failed) - 1} more file(s) failed; see the build log)"
        return _failed(outcome, rubric, ErrorClass.build_error, message)

    # GPU stages (correctness, timing, scoring) come with the GPU grading core.
    outcome.state = RunState.built
    outcome.message = NO_GPU_STAGE_MESSAGE
    outcome.problems = not_run_problems(rubric, "not graded: no GPU stage on this worker yet")
    return outcome


def _failed(outcome: Outcome, rubric: Rubric, error: ErrorClass, message: str) -> Outcome:
    outcome.state = RunState.failed
    outcome.error_class = error
    outcome.message = message
    outcome.problems = not_run_problems(rubric, f"not graded: {error.value}")
    return outcome
