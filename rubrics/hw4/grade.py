"""hw4's GPU stage: every problem measured in sandboxed children, then scored.

`run_gpu_stage` is what the pipeline calls after a successful build: one fresh child per
problem on a private copy of the staged tree; for the timing, one more child on a copy whose
basic-ops library is ours (the rubric's `reference_ops`) and one on our reference kit
(rubrics.hw4.speed). First, a probe child per part of the submission (each library, the
minitorch package) loads it, so a part that hangs or crashes at load is found once and what
needs it is settled at once (rubrics.hw4.loading); the whole stage keeps to the run's GPU time
budget (`StageConfig.budget_s`, worker.gpu.budget). Last, a kernel problem with a failed C ABI
case has its smallest one run again under CUDA's compute-sanitizer (rubrics.hw4.sanitize,
`StageConfig.sanitizer`). Nothing here judges points:
worker.scoring does that from the measurements.
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from rubrics.hw4 import kernels, problem3, sanitize, speed
from rubrics.hw4.cases import load_cases
from rubrics.hw4.hangs import FUSED_KINDS
from rubrics.hw4.kernel_checks import Check
from rubrics.hw4.loading import MINITORCH, PROBE_ARENA_BYTES, LoadGate
from worker.assignment import GpuStage, StageConfig, StageProgress
from worker.gpu import copy_peak
from worker.gpu.budget import Deadline
from worker.gpu.client import ChildClient
from worker.gpu.gpu_lock import GpuTurns
from worker.gpu_conditions import ConditionsWatch, GpuConditions
from worker.measurements import ProblemMeasurement
from worker.rubric import KIT_LIBRARY_BUILT, Rubric
from worker.sandbox import Sandbox
from worker.states import Piece
from worker.telemetry import GpuBusySampler, gpu_snapshot

KERNEL_PROBLEMS = ("1.1", "1.2", "2.1", "2.2")
KERNEL_ARENA_BYTES = 512 * 1024 * 1024
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", ".kg-arena")


@dataclass(frozen=True)
class GpuStageConfig(StageConfig):
    """The settings' StageConfig (limits, policy, seed, timing CPUs) and hw4's own knobs, whose
    defaults are production's (tests and benches shrink them)."""

    timing: speed.TimingConfig = field(default_factory=speed.TimingConfig)
    problem3: problem3.Problem3Config = field(default_factory=problem3.Problem3Config)
    problems: tuple[str, ...] = (*KERNEL_PROBLEMS, "3")  # a subset only for tests and calibration
    # How long a part of the submission (a library, the minitorch package) may take to load
    # in its probe child (rubrics.hw4.loading). A correct minitorch imports in a few seconds
    # (bench/split_burst.py prints each upload's); a package that hangs costs this much GPU
    # time, which must stay below a correct grade's (tests/gpu/test_load_failures_gpu.py).
    load_timeout_s: float = 30.0
    # Children with steady malloc settings (worker.gpu.client), so a timing does not depend on
    # the process; False only to measure what that is worth (bench/timing_stability.py).
    steady_memory: bool = True

    @classmethod
    def of(cls, config: StageConfig) -> GpuStageConfig:
        """`config` itself when it is one already (tests, benches), else it with hw4's defaults."""
        if isinstance(config, GpuStageConfig):
            return config
        return cls(**{f.name: getattr(config, f.name) for f in fields(StageConfig)})


def stage_for(config: StageConfig, progress: StageProgress) -> GpuStage:
    """hw4's stage as the pipeline calls it (worker.assignment.StageFactory): it runs only the
    problems the pipeline passes it (those whose kernels built)."""
    own = GpuStageConfig.of(config)

    def stage(rubric: Rubric, staged: Path, reference: Path, work_dir: Path,
              problems: tuple[str, ...]) -> list[ProblemMeasurement]:
        chosen = replace(own, problems=tuple(p for p in own.problems if p in problems))
        return run_gpu_stage(rubric, staged, reference, work_dir, chosen, progress)

    return stage


def _fresh_copy(source: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, ignore=_COPY_IGNORE)
    return dest


def _reference_ops_child(rubric: Rubric, staged_root: Path, trusted_root: Path, work_dir: Path,
                         open_child: Callable[..., ChildClient]) -> ChildClient | None:
    """The submission's tree with our basic-ops library in place of its own, in a child of
    its own (the submission's Python runs there too: it is never given our kit's)."""
    ops = rubric.kit_library
    if ops is None or not (trusted_root / KIT_LIBRARY_BUILT).is_file():
        return None
    tree = _fresh_copy(staged_root, work_dir / "reference-ops-tree")
    (tree / ops.output).unlink(missing_ok=True)
    shutil.copyfile(trusted_root / KIT_LIBRARY_BUILT, tree / ops.output)
    return open_child("reference-ops", tree, kernels.HANDLERS, KERNEL_ARENA_BYTES)


def _libraries(rubric: Rubric, problem_id: str) -> tuple[str, ...]:
    """The built libraries a problem's code loads: those of the kernels the rubric says it needs."""
    needs = next(p for p in rubric.problems if p.id == problem_id).needs
    return tuple(k.output for k in rubric.kernels if k.name in needs)


def _thresholds(rubric: Rubric, problem_id: str) -> tuple[float, ...]:
    """The speedups where the problem's points change (its floor and target): the stage
    measures until its figure is clear of them."""
    problem = next(p for p in rubric.problems if p.id == problem_id)
    scoring = problem.scoring  # its target is the reference speedup unless the rubric or a calibration set one
    return scoring.thresholds() if scoring.target is not None else scoring.thresholds(problem.reference_speedup)


def _problem3(client: ChildClient, config: GpuStageConfig, deadline: Deadline, rng: np.random.Generator,
              telemetry: Callable[[], dict[str, Any]], thresholds: tuple[float, ...],
              watch: ConditionsWatch, turns: GpuTurns) -> ProblemMeasurement:
    """Problem 3 in its child, its timed pairs stopping in time for what is left of the run's
    budget (its own budget is the most it takes), each pair a window `watch` reads; its timed
    pairs wait for the timing piece when this is the checks piece, and hold the GPU alone
    (`turns`) when this is the timing piece."""
    own = replace(config.problem3, budget_s=min(config.problem3.budget_s, deadline.left()),
                  timed=config.piece is not Piece.checks)
    with GpuBusySampler(config.policy.gpu_index or 0) as busy:
        m3 = problem3.measure_problem3(client, own, rng, telemetry, thresholds=thresholds, watch=watch,
                                        turns=turns)
    m3.telemetry["gpu_busy"] = busy.summary()
    return m3


def _grade_problem3(rubric: Rubric, config: GpuStageConfig, gate: LoadGate, rng: np.random.Generator,
                    telemetry: Callable[[], dict[str, Any]], conditions: GpuConditions,
                    open_child: Callable[[], ChildClient], turns: GpuTurns) -> ProblemMeasurement:
    """Problem 3 in a child of its own, or not run (no child) when a part it needs did not load
    or a launcher its fused model calls hung (rubrics.hw4.hangs); the child starts on the GPU's
    lock shared (`turns`)."""
    gate.settle()  # no load probe runs beside the spawn below
    parts = (*_libraries(rubric, "3"), MINITORCH)
    blocked = gate.blocked(*parts) or gate.hangs.why(FUSED_KINDS)
    if blocked:
        logs = [log for log in map(gate.log, parts) if log]
        return ProblemMeasurement("3", status="not_run", log_tail="\n".join(logs) or blocked,
                                  telemetry={"gpu_before": telemetry()})
    with turns.sharing():
        client = open_child()
    with client:
        return _problem3(client, config, gate.deadline, rng, telemetry, _thresholds(rubric, "3"), conditions.watch(),
                         turns)


def _kernel_problems(rubric: Rubric, problems: tuple[str, ...]) -> list[kernels.KernelSpec]:
    """The kernel problems to run of `problems`: each with its cases, the speedups where its
    points change and the libraries it loads."""
    cases = load_cases(rubric.path or rubric.slug)
    return [(pid, cases[pid], _thresholds(rubric, pid), _libraries(rubric, pid))
            for pid in KERNEL_PROBLEMS if pid in problems]


def _record_run(measurements: list[ProblemMeasurement], gate: LoadGate, budget_s: float | None, deadline: Deadline,
                turns: GpuTurns) -> None:
    """The record of what loaded, what hung, of the budget and of a timing piece's turns on the
    GPU's lock, once per run, in every problem's telemetry."""
    hung, turns_held = gate.hangs.record(), turns.record()
    for m in measurements:
        if turns_held is not None:
            m.telemetry["gpu_turns"] = turns_held
        m.telemetry["load"] = gate.record()
        if hung:
            m.telemetry["hung"] = hung
        m.telemetry["budget"] = {"budget_s": budget_s, "stage_s": round(time.monotonic() - deadline.started, 1),
                                 "used_s": round(deadline.used(), 1)}  # the stage's seconds, queueing left out


def _open_sides(rubric: Rubric, staged_root: Path, trusted_root: Path | None, work_dir: Path,
                open_child: Callable[..., ChildClient], gpu: bool) -> speed.Sides:
    """The timing's side children (our kit's, the submission's on our basic ops), where there
    is a trusted tree (none: no kernel problem to time); on a GPU (`gpu`) the kit's child also
    measures the GPU's copy peak (worker.gpu.copy_peak)."""
    sides = speed.Sides({}, copy_peak=gpu)
    if trusted_root is not None:
        handlers = (*kernels.HANDLERS, copy_peak.HANDLERS) if gpu else kernels.HANDLERS
        sides.clients["kit"] = open_child("trusted", trusted_root, handlers, KERNEL_ARENA_BYTES)
        sides.clients["reference_ops"] = _reference_ops_child(rubric, staged_root, trusted_root, work_dir, open_child)
    if sides.client("reference_ops") is None:
        sides.drop("reference_ops", "no library of reference basic ops was available")
    return sides


def _open_problem_child(open_child: Callable[..., ChildClient], staged_root: Path, label: str) -> ChildClient:
    return open_child(f"problem-{label}", staged_root, kernels.HANDLERS, KERNEL_ARENA_BYTES)


def _kernel_measurements(kernel_problems: list[kernels.KernelSpec], config: GpuStageConfig,
                         open_student: kernels.ClientFactory, sides: speed.Sides, gate: LoadGate,
                         rng: np.random.Generator, telemetry: Callable[[], dict[str, Any]], progress: StageProgress,
                         failed_abi: dict[str, list[Check]], conditions: GpuConditions,
                         turns: GpuTurns) -> list[ProblemMeasurement]:
    """The kernel problems (rubrics.hw4.kernels), the side children closed after; GPU utilisation is
    recorded per part of the stage: the kernel problems share one figure."""
    try:
        with GpuBusySampler(config.policy.gpu_index or 0) as busy:
            measured = kernels.grade_kernel_problems(
                kernel_problems, open_student, sides, gate, rng, config.timing, telemetry, progress,
                config.timing_cpus, failed_abi, conditions, config.piece, turns)
    finally:
        sides.close()
    for m in measured:
        m.telemetry["gpu_busy"] = busy.summary()
    return measured


def run_gpu_stage(
    rubric: Rubric,
    staged_root: Path,
    trusted_root: Path | None,
    work_dir: Path,
    config: GpuStageConfig,
    progress: StageProgress = StageProgress(),
) -> list[ProblemMeasurement]:
    """Measure the problems of hw4 that `config.problems` names (every one by default) for the
    built submission in `staged_root`."""
    piece, turns = config.piece, GpuTurns(config.gpu_lock if config.piece is Piece.timing else None)
    deadline = Deadline(config.budget_s, queued=turns.waited)  # waiting for the lock is not the run's GPU time
    sandbox = Sandbox(config.limits, config.policy)
    rng = np.random.default_rng(config.seed)
    gpu = config.policy.gpu_index or 0
    telemetry = partial(gpu_snapshot, gpu)

    def open_child(label: str, root: Path, handlers: tuple[str, ...], arena: int, within: Deadline = deadline,
                   wrapper: Sequence[str] = ()) -> ChildClient:
        return ChildClient(sandbox, _fresh_copy(root, work_dir / label), handlers, arena, config.policy.gpu_index,
                           config.steady_memory, within, wrapper=wrapper)

    def open_wrapped(label: str, wrapper: Sequence[str], cap: Deadline) -> ChildClient:
        return open_child(label, staged_root, kernels.HANDLERS, KERNEL_ARENA_BYTES, cap, wrapper)

    measurements: list[ProblemMeasurement] = []
    kernel_problems = _kernel_problems(rubric, config.problems)
    gate = LoadGate(deadline, config.load_timeout_s, cuda=config.policy.gpu_index is not None)
    conditions = GpuConditions.open(gpu)  # NVML for the timing windows' readings, or why there is none
    failed_abi: dict[str, list[Check]] = {}
    try:
        with turns.sharing():  # a timing piece's children start beside other runs' checks, never a timing
            gate.open([*(k.output for k in rubric.kernels), MINITORCH],
                      lambda label: open_child(label, staged_root, kernels.HANDLERS, PROBE_ARENA_BYTES))
            timed = kernel_problems and piece is not Piece.checks
            sides = _open_sides(rubric, staged_root, trusted_root if timed else None, work_dir, open_child,
                                config.policy.gpu_index is not None)
        measurements.extend(_kernel_measurements(kernel_problems, config, partial(
            _open_problem_child, open_child, staged_root), sides, gate, rng, telemetry, progress, failed_abi,
            conditions, turns))
        if "3" in config.problems:
            progress.problem("3")
            measurements.append(_grade_problem3(rubric, config, gate, rng, telemetry, conditions, partial(
                open_child, "problem-3", staged_root, (problem3.HANDLERS,), problem3.arena_bytes(config.problem3)),
                turns))
        # last, so that it cannot take time from anything that scores
        sanitize.sanitize_failed(failed_abi, measurements, config.sanitizer, open_wrapped, deadline,
                                 config.policy.gpu_index is not None, config.timing.call_timeout_s,
                                 lambda check: gate.hangs.why(check.launchers, check.case.public))
        _record_run(measurements, gate, config.budget_s, deadline, turns)
    finally:
        gate.close()
        conditions.close()
    return measurements
