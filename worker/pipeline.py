"""The grading pipeline: unpack -> stage -> build -> (GPU stages) -> report.

Plain Python with no Celery and no database: given an archive, a rubric and a job folder it
returns an Outcome. The service's run lifecycle (grader.runs: the Celery task, the claim and the
record) wraps it.

Build failures isolate (worker.build_isolation): a kernel that did not compile, or whose source
the submission lacks, makes only the problems that need it (the rubric's `needs:`) not graded,
each saying why; the others are graded, with an empty stand-in library in place of the failed
one (a student's code may load every library at import, as hw4's does). Only when no problem
is left does the run fail.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from worker.assignment import GpuStage, assignment_of
from worker.build import (
    BuildResult,
    Confinement,
    KernelTarget,
    Toolchain,
    ToolchainFault,
    build_kernels,
    build_stub,
    nvcc_version,
)
from worker.build_isolation import (
    Unusable,
    blocked_problems,
    blocked_summary,
    build_error_message,
    first_error_line,
    isolation_log,
    not_graded,
    unusable_kernels,
)
from worker.gpu.gpu_lock import GpuLock, held
from worker.measure_key import measurement_key
from worker.measurements import ProblemMeasurement
from worker.pieces import PASSED_OVER, merge_timing, pending_problems, settle_pending
from worker.report import gradescope_results
from worker.rubric import KIT_LIBRARY_BUILT, PROJECT_ROOT, Rubric
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy
from worker.scoring import score_run
from worker.stage import Staged, stage_submission
from worker.states import ErrorClass, Piece, RunState
from worker.unpack import BadArchive, UnpackLimits, find_assignment_root, unpack_zip

NO_GPU_STAGE_MESSAGE = (
    "Build succeeded. This worker has no GPU stage (no GPU, or GPU grading is off), "
    "so no score was given."
)

# A submission's nvcc when the config names no limits (grader.runs.engine_config takes them from the settings,
# whose defaults these are).
BUILD_LIMITS = SandboxLimits(wall_s=300.0, cpu_s=300, memory_bytes=4 << 30, max_processes=64,
                             file_size_bytes=512 << 20)


@dataclass(frozen=True)
class PipelineConfig:
    limits: UnpackLimits
    toolchain: Toolchain
    build_cache_dir: Path | None
    build_jobs: int
    log_limit_bytes: int
    # Every nvcc of a submission runs in this sandbox (by default as "nobody", without network).
    build_limits: SandboxLimits = BUILD_LIMITS
    build_policy: SandboxPolicy = SandboxPolicy()
    # The GPU's lock between the worker processes of a host, when runs are graded in two pieces
    # (worker.gpu.gpu_lock): builds and checks share it, a timing piece holds it alone.
    gpu_lock: GpuLock | None = None


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
    report: dict[str, Any] | None = None  # Gradescope-format results.json
    measure_key: str | None = None  # worker.measure_key's, where a Reuse was given and there is a stage
    reused_from: int | None = None  # the run whose measurements these are, where they were reused


StageListener = Callable[[str], None]


@dataclass(frozen=True)
class Reuse:
    """Measurements taken before for the same inputs (grader.runs.reuse). `context`: what besides
    the staged tree, the rubric and the toolchain shapes a measurement (the GPU model, the
    targets, the stage's settings), for the key. `lookup` (None: measure afresh) is asked after
    staging with the key and the outcome so far, and answers an earlier run's outcome or None."""

    context: dict[str, Any]
    lookup: Callable[[str, Outcome], Outcome | None] | None = None


def _truncate(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    head = data[: limit // 2].decode(errors="ignore")
    tail = data[-limit // 2 :].decode(errors="ignore")
    return f"{head}\n... [{len(data) - limit} bytes cut] ...\n{tail}"


def shown_command(command: list[str]) -> str:
    """A build command as the student reads it, without the worker's install paths: the
    compiler by its name, and an absolute path more than two folders deep (the toolkit's
    include folder in a virtual environment) by its last two parts after ".../". The
    submission's own paths are relative already (worker.build runs nvcc in its folder)."""
    def shown(arg: str) -> str:
        flag, path = (arg[:2], arg[2:]) if arg.startswith(("-I", "-L")) else ("", arg)
        parts = Path(path).parts
        return arg if not path.startswith(os.sep) or len(parts) <= 3 else f"{flag}.../{'/'.join(parts[-2:])}"

    return " ".join([Path(command[0]).name, *map(shown, command[1:])]) if command else ""


def _build_log(results: list[BuildResult]) -> str:
    parts = []
    for r in results:
        status = "cached" if r.cached else ("ok" if r.ok else "FAILED")
        ran = " (the same sources built before: the library and this output are the build cache's)" if r.cached else ""
        parts.append(f"== {r.name} ({status}, {r.seconds:.1f} s)\n$ {shown_command(r.command)}{ran}\n{r.log}")
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


def build_confinement(config: PipelineConfig, job_dir: Path) -> Confinement:
    """How a submission's nvcc runs: the build's sandbox, each target in a folder of `job_dir`/build."""
    return Confinement(Sandbox(config.build_limits, config.build_policy), job_dir / "build")


def build_reference(rubric: Rubric, config: PipelineConfig, dest: Path, confine: Confinement | None = None) -> Path:
    """Our reference kit, built like a submission (cached), for the trusted baseline; with the
    rubric's `kit_library` built beside it (at KIT_LIBRARY_BUILT). With `confine`,
    in the build's sandbox, as a submission's (the worker's start check: prove_kit_builds)."""
    shutil.copytree(rubric.starter_dir, dest, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    targets = list(rubric.kernels)
    if rubric.kit_library is not None:
        source = Path("src") / f"kg_{rubric.kit_library.name}.cu"
        shutil.copyfile(PROJECT_ROOT / rubric.kit_library.source, dest / source)
        targets.append(KernelTarget(rubric.kit_library.name, source.as_posix(), KIT_LIBRARY_BUILT))
    results = build_kernels(dest, targets, config.toolchain, config.build_cache_dir, config.build_jobs, confine)
    failed = [r for r in results if not r.ok]
    if failed:  # our own kit: never the student's fault
        raise ToolchainFault(f"the reference kit did not build: {failed[0].name}: {first_error_line(failed[0].log)}")
    return dest


def prove_kit_builds(rubric: Rubric, config: PipelineConfig, folder: Path) -> None:
    """Build the assignment's reference kit in the fresh `folder` as a submission's kernels are
    built (the build's sandbox, the build cache): a worker checks this before its first job, so
    a toolchain that cannot build the assignment (a header missing, the sandbox's view short of
    the toolkit) refuses jobs instead of failing every submission. Raises ToolchainFault."""
    if rubric.kernels:
        build_reference(rubric, config, folder / "kit", build_confinement(config, folder))


def grade_submission(
    archive: Path,
    rubric: Rubric,
    job_dir: Path,
    config: PipelineConfig,
    on_stage: StageListener = lambda _stage: None,
    gpu_stage: GpuStage | None = None,
    targets: dict[str, float] | None = None,
    piece: Piece = Piece.whole,
    reuse: Reuse | None = None,
) -> Outcome:
    """Run every stage for one archive in the fresh folder `job_dir`. Without a GPU stage a
    successful build ends `built`; with one, the run is measured and scored (against
    `targets`, per-GPU calibrated speedups, where given; else the rubric's), unless `reuse`
    finds the same staged tree measured before. With `piece` `checks` (the GPU stage made for
    that piece) it ends `checked`: correctness verdicts and points, the timings left to
    `time_submission`; or `scored` when no problem is left to time."""
    outcome = Outcome(state=RunState.building, toolchain=toolchain_info(config.toolchain))
    prepared = _prepare(archive, rubric, job_dir, config, outcome, on_stage, reuse if gpu_stage is not None else None)
    if not isinstance(prepared, tuple):
        return prepared or outcome  # refused (the outcome says why), or measured before
    root, built = prepared
    if not built.gradable:
        return _failed(outcome, rubric, ErrorClass.build_error, build_error_message(rubric, built.unusable),
                       built.blocked)
    if gpu_stage is None:
        return _built_without_gpu_stage(outcome, rubric, built)
    on_stage("run")
    measurements = _measure(gpu_stage, root, rubric, job_dir, config, outcome, built, built.gradable, targets,
                            alone=piece is not Piece.checks)
    if piece is Piece.checks and pending_problems(measurements):
        return _checked(outcome, rubric, measurements, targets, built)
    return _scored_with_blocked(outcome, rubric, measurements, targets, built)


class PieceMismatch(RuntimeError):
    """The timing piece found the submission other than its checks piece did (a build that
    failed only now): our side's fault, retried as an infrastructure error."""


def time_submission(
    archive: Path,
    rubric: Rubric,
    job_dir: Path,
    config: PipelineConfig,
    gpu_stage: GpuStage,
    checked: list[ProblemMeasurement],
    targets: dict[str, float] | None = None,
    on_stage: StageListener = lambda _stage: None,
    not_timed: str | None = None,
) -> Outcome:
    """The timing piece of a run whose checks piece left `checked`: the same archive unpacked,
    staged and built again (the build cache's), the pending problems timed by `gpu_stage` (made
    for the timing piece) with the GPU held alone, and the whole scored. Its stage records are
    named `timing_<stage>`. With `not_timed` (why) nothing is timed: the pending problems are
    scored without speed, saying why, and listed under PASSED_OVER in the toolchain record."""
    outcome = Outcome(state=RunState.building, toolchain=toolchain_info(config.toolchain))
    if not_timed is not None:  # nothing of it runs on the GPU: its build (the cache's) waits for no timing
        config = replace(config, gpu_lock=None)
    prepared = _prepare(archive, rubric, job_dir, config, outcome, on_stage)
    pending = pending_problems(checked)
    if not isinstance(prepared, tuple) or any(p not in prepared[1].gradable for p in pending):
        raise PieceMismatch(f"the submission did not build for its timing as it did for its checks: {outcome.message}")
    root, built = prepared
    if not_timed is not None:
        outcome.toolchain[PASSED_OVER] = list(pending)
        merged = settle_pending(checked, not_timed)
    else:
        on_stage("run")
        merged = merge_timing(checked, _measure(gpu_stage, root, rubric, job_dir, config, outcome, built, pending,
                                                targets, alone=True))
    scored = _scored_with_blocked(outcome, rubric, merged, targets, built)
    scored.stages = {f"timing_{name}": record for name, record in scored.stages.items()}
    return scored


def _prepare(archive: Path, rubric: Rubric, job_dir: Path, config: PipelineConfig, outcome: Outcome,
             on_stage: StageListener, reuse: Reuse | None = None) -> tuple[Path, _Built] | Outcome | None:
    """The archive unpacked, staged and built (a stand-in library for each unusable kernel):
    the staged root and what the build left gradable; None when the archive is refused (the
    outcome says why); an earlier run's outcome when `reuse` finds the staged tree measured."""
    on_stage("unpack")
    student_root = _unpack(archive, rubric, job_dir, config, outcome)
    if student_root is None:
        return None
    on_stage("stage")
    staged = _stage(student_root, rubric, job_dir, config, outcome)
    if reuse is not None:
        outcome.measure_key = measurement_key(staged.root, rubric, outcome.toolchain, reuse.context)
        earlier = reuse.lookup(outcome.measure_key, outcome) if reuse.lookup else None
        if earlier is not None:
            earlier.measure_key = outcome.measure_key
            return earlier
    on_stage("build")
    with held(config.gpu_lock, alone=False):  # nvcc is CPU-heavy: never beside a timing
        built = _build(staged, rubric, job_dir, config, outcome)
    if built.unusable and built.gradable:
        _stand_in_for_unusable(staged.root, built.unusable, job_dir, config)
    return staged.root, built


@dataclass(frozen=True)
class _Built:
    """What the build left gradable: the kernels that cannot be used, the problems they block
    (problem id -> why it cannot be graded) and the problems left."""

    unusable: list[Unusable]
    blocked: dict[str, list[str]]
    gradable: tuple[str, ...]


def _timed_stage(outcome: Outcome, name: str, started: float, status: str, log: str) -> None:
    outcome.stages[name] = StageRecord(status, time.monotonic() - started, log)


def _unpack(archive: Path, rubric: Rubric, job_dir: Path, config: PipelineConfig, outcome: Outcome) -> Path | None:
    """The submission's assignment folder, unpacked; None when the archive is refused (the
    outcome then says why)."""
    started = time.monotonic()
    try:
        unpacked = unpack_zip(archive, job_dir / "upload", config.limits)
        student_root = find_assignment_root(job_dir / "upload", rubric.required_files)
    except BadArchive as exc:
        _timed_stage(outcome, "unpack", started, "failed", str(exc))
        _failed(outcome, rubric, ErrorClass.bad_archive, str(exc))
        return None
    where = student_root.relative_to(job_dir / "upload").as_posix()
    _timed_stage(outcome, "unpack", started, "ok",
                 f"{unpacked.files} files, {unpacked.total_bytes} bytes; assignment folder: {where}")
    return student_root


def _stage(student_root: Path, rubric: Rubric, job_dir: Path, config: PipelineConfig,
           outcome: Outcome) -> Staged:
    started = time.monotonic()
    staged = stage_submission(student_root, rubric, job_dir / "staged")
    ignored = ", ".join(staged.ignored[:20]) + (" ..." if len(staged.ignored) > 20 else "")
    text = f"taken from the submission: {', '.join(staged.taken)}\nignored: {ignored or 'nothing'}"
    if staged.missing:
        text += f"\nmissing (never taken from the starter, so not built): {', '.join(staged.missing)}"
    _timed_stage(outcome, "stage", started, "ok", _truncate(text, config.log_limit_bytes))
    return staged


def _build(staged: Staged, rubric: Rubric, job_dir: Path, config: PipelineConfig,
           outcome: Outcome) -> _Built:
    """Every kernel of the submission built, each nvcc in the build sandbox."""
    started = time.monotonic()
    confine = build_confinement(config, job_dir)
    results = build_kernels(
        staged.root, list(rubric.kernels), config.toolchain, config.build_cache_dir, config.build_jobs, confine
    )
    unusable = unusable_kernels(rubric, results, staged.missing)
    blocked = blocked_problems(rubric, unusable)
    log = _build_log(results) + (isolation_log(rubric, unusable, blocked) if unusable else "")
    _timed_stage(outcome, "build", started, "failed" if unusable else "ok", _truncate(log, config.log_limit_bytes))
    outcome.toolchain["build_seconds"] = {r.name: round(r.seconds, 2) for r in results}
    outcome.toolchain["build_cached"] = {r.name: r.cached for r in results}
    return _Built(unusable, blocked, tuple(p.id for p in rubric.problems if p.id not in blocked))


def _stand_in_for_unusable(root: Path, unusable: list[Unusable], job_dir: Path, config: PipelineConfig) -> None:
    """An empty library where each unusable one belongs (a student's code may load them all at import)."""
    stub = build_stub(config.toolchain, job_dir / "stub", config.build_cache_dir)
    for u in unusable:
        (root / u.kernel.output).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stub, root / u.kernel.output)


def _built_without_gpu_stage(outcome: Outcome, rubric: Rubric, built: _Built) -> Outcome:
    outcome.state = RunState.built
    outcome.message = NO_GPU_STAGE_MESSAGE
    if built.blocked:
        outcome.message = (f"{blocked_summary(built.unusable, built.blocked)} This worker has no GPU stage (no GPU, "
                           "or GPU grading is off), so no score was given.")
    outcome.problems = [
        ProblemOutcome(p.id, p.title, "not_run", 0.0, p.points,
                       not_graded(built.blocked[p.id]) if p.id in built.blocked
                       else "not graded: no GPU stage on this worker")
        for p in rubric.problems
    ]
    return outcome


def _measure(gpu_stage: GpuStage, root: Path, rubric: Rubric, job_dir: Path, config: PipelineConfig,
             outcome: Outcome, built: _Built, problems: tuple[str, ...], targets: dict[str, float] | None,
             alone: bool) -> list[ProblemMeasurement]:
    """The reference kit built, the GPU stage run on `problems`, its measurements with paths as
    the student reads them. The GPU's lock is held shared, but for a timing (`alone`): its stage
    holds the lock itself (StageConfig.gpu_lock), shared while its children start and warm,
    alone only while it times."""
    with held(config.gpu_lock, alone=False):
        started = time.monotonic()
        reference = build_reference(rubric, config, job_dir / "reference")
        _timed_stage(outcome, "reference", started, "ok", "reference kit built")
    started = time.monotonic()
    with held(None if alone else config.gpu_lock, alone=False):
        measured = gpu_stage(rubric.with_targets(targets), root, reference, job_dir / "run", problems)
    relative = submission_paths(job_dir, root)
    # A problem left out never scores, whatever a GPU stage returns for it.
    measurements = [_rewrite_strings(m, relative) for m in measured if m.problem_id in problems]
    blocked = "".join(f"{pid}: {not_graded(why)}\n" for pid, why in built.blocked.items())
    run_log = blocked + _run_log(measurements, assignment_of(rubric).words.figures)
    _timed_stage(outcome, "run", started, "ok", _truncate(run_log, config.log_limit_bytes))
    outcome.toolchain["targets"] = targets or {p.id: p.reference_speedup for p in rubric.problems}
    outcome.toolchain["targets_calibrated"] = bool(targets)
    return measurements


def _scored_with_blocked(outcome: Outcome, rubric: Rubric, measurements: list[ProblemMeasurement],
                         targets: dict[str, float] | None, built: _Built) -> Outcome:
    scored = _scored(outcome, rubric, measurements, targets, built.blocked)
    if built.blocked:
        scored.message += " " + blocked_summary(built.unusable, built.blocked)
    return scored


def _checked(outcome: Outcome, rubric: Rubric, measurements: list[ProblemMeasurement],
             targets: dict[str, float] | None, built: _Built) -> Outcome:
    """The checks piece's end: every problem scored as far as its checks go (no speed points
    yet), the run `checked` with no score until its timing."""
    checked = _scored_with_blocked(outcome, rubric, measurements, targets, built)
    correctness = sum(p.details["score"]["correctness_points"] for p in checked.problems if p.details)
    checked.state, checked.score, checked.report = RunState.checked, None, None
    checked.message = (f"Correctness checked: {correctness:g} correctness points. The speed of "
                       f"{len(pending_problems(measurements))} problem(s) is measured when the GPU is free.")
    return checked


def submission_paths(job_dir: Path, staged_root: Path) -> Callable[[str], str]:
    """A rewrite of text for the student: paths into the job folder become relative to the
    submission root. The GPU stage's children run in copies of the staged tree
    (job_dir/run/<child>/), so `<job>/run/problem-1.1/minitorch/ops.py` reads `minitorch/ops.py`;
    anything else in the job folder is shown relative to it."""
    jobs = dict.fromkeys((job_dir.absolute(), job_dir.resolve()))
    roots = dict.fromkeys((staged_root.absolute(), staged_root.resolve()))
    copies = [re.escape(f"{job}{os.sep}run{os.sep}") + r"[^/\s'\"]+/" for job in jobs]
    folders = [re.escape(f"{folder}{os.sep}") for folder in (*roots, *jobs)]
    pattern = re.compile("|".join(copies + folders))
    return lambda text: pattern.sub("", text)


def _rewrite_strings(measurement: ProblemMeasurement, rewrite: Callable[[str], str]) -> ProblemMeasurement:
    """The measurement with `rewrite` applied to every string in it (log tail, case messages)."""
    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return rewrite(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return ProblemMeasurement.from_dict(walk(measurement.to_dict()))


def _run_log(measurements: list[ProblemMeasurement], figure_words: dict[str, str]) -> str:
    lines = []
    for m in measurements:
        passed = sum(c.ok for c in m.cases)
        line = f"{m.problem_id}: {m.status}, {passed}/{len(m.cases)} checks passed"
        line += "".join(f", speedup {figure.describe()} ({figure_words.get(name, name)})"
                        for name, figure in m.figures.items())
        lines.append(line)
        if m.status != "ok" and m.log_tail:
            lines.append("  " + m.log_tail.strip().replace("\n", "\n  ")[-2000:])
    return "\n".join(lines)


def _scored(outcome: Outcome, rubric: Rubric, measurements: list[ProblemMeasurement],
            targets: dict[str, float] | None, blocked: dict[str, list[str]]) -> Outcome:
    run_score = score_run(rubric, measurements, targets=targets)
    for s in run_score.problems:  # not run for want of a kernel: say which (scoring only knows "not run")
        if s.problem_id in blocked:
            s.reasons = [f"{s.problem_id}: {not_graded(blocked[s.problem_id])}; 0 of {s.max_points:g} points"]
    by_id = {m.problem_id: m for m in measurements}
    titles = {p.id: p.title for p in rubric.problems}
    outcome.state = RunState.scored
    outcome.score = run_score.total
    outcome.message = f"Scored {run_score.total:g} / {run_score.max_total:g}."
    outcome.problems = [
        ProblemOutcome(
            problem_id=s.problem_id,
            title=titles[s.problem_id],
            status=s.status,
            points=s.points,
            max_points=s.max_points,
            message=(not_graded(blocked[s.problem_id]) if s.problem_id in blocked
                     else "; ".join(s.reasons) if s.reasons else "full marks"),
            details={"score": s.to_dict(), "measurement": by_id[s.problem_id].to_dict()
                     if s.problem_id in by_id else None},
        )
        for s in run_score.problems
    ]
    outcome.report = gradescope_results(rubric, run_score, measurements)
    return outcome


def _failed(outcome: Outcome, rubric: Rubric, error: ErrorClass, message: str,
            reasons: dict[str, list[str]] | None = None) -> Outcome:
    """A run that grades nothing; `reasons` (problem id -> why) replaces the error class in a
    problem's message."""
    outcome.state = RunState.failed
    outcome.error_class = error
    outcome.message = message
    outcome.problems = not_run_problems(rubric, f"not graded: {error.value}")
    for p in outcome.problems:
        if reasons and p.problem_id in reasons:
            p.message = not_graded(reasons[p.problem_id])
    return outcome
