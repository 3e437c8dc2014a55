"""The assignment as a plug-in: what generic code needs of an assignment beyond its rubric.

A rubric names its plug-in with `plugin:`, a module name (rubrics/hw4/rubric.yaml: `rubrics.hw4`) or a
.py file relative to the rubric (an assignment kept in a folder of its own, as the tests'
vecadd); that module exposes one `Plugin` as ASSIGNMENT. The pipeline, the service's run
lifecycle, the CLI, the starter kit, scoring and mutants reach an assignment's
own code and words only through `assignment_of(rubric)`, so a second assignment is a rubric
and a plug-in module, with no edit to generic code. A rubric without `plugin:` has no stage:
its runs end `built`.

Standard library only (the stage's types under TYPE_CHECKING): importable on a bare GPU machine.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from worker.states import Piece

if TYPE_CHECKING:  # pragma: no cover
    from worker.affinity import TimingCpus
    from worker.gpu.gpu_lock import GpuLock
    from worker.gpu_time import GpuTimeReader, TimingReader
    from worker.measurements import ProblemMeasurement
    from worker.rubric import ProblemScoring, Rubric
    from worker.sandbox import SandboxLimits, SandboxPolicy
    from worker.sanitizer import SanitizerConfig

PLUGIN_OBJECT = "ASSIGNMENT"  # the name a plug-in module gives its Plugin


class AssignmentError(ValueError):
    """A rubric's plug-in cannot be found or is not a Plugin."""


@dataclass(frozen=True)
class StageConfig:
    """What every assignment's stage gets from the worker's settings (grader.runs.engine_config)."""

    limits: SandboxLimits
    policy: SandboxPolicy
    seed: int | None = None  # None: fresh inputs on every grade (hidden values never repeat)
    timing_cpus: TimingCpus | None = None  # cores for a timing phase (worker.affinity); None: unpinned
    # The most wall time the whole stage of one run may hold its GPU (KG_GPU_BUDGET_S); past it,
    # what is left is settled as not run, saying so (worker.gpu.budget). None: no budget.
    budget_s: float | None = None
    # CUDA's compute-sanitizer on a failed case (KG_SANITIZER, KG_SANITIZER_CAP_S): None, off.
    sanitizer: SanitizerConfig | None = None
    # Which part of the grade the stage measures (worker.states.Piece, worker.pieces).
    piece: Piece = Piece.whole
    # The GPU's lock between the host's worker processes (worker.gpu.gpu_lock): a timing piece's
    # stage takes its turns with it (shared while warming, alone while timing). None: no lock.
    gpu_lock: GpuLock | None = None


# The GPU stage: (rubric, staged tree, reference tree, work dir, ids of the problems to run:
# those whose kernels built) -> one measurement per problem run. The pipeline calls it after a
# good build (names in quotes: their modules are not imported here).
GpuStage = Callable[["Rubric", Path, Path, Path, tuple[str, ...]], "list[ProblemMeasurement]"]


def _ignore(*_args: object) -> None:
    return None


@dataclass(frozen=True)
class StageProgress:
    """What a stage tells the service while it runs (best-effort notes for the run page)."""

    # a problem's measuring starts (its id)
    problem: Callable[[str], None] = _ignore
    # the correctness verdicts of these problems are known, and of them the ids in the set are
    # still to be timed: the run page shows the verdicts while speed is measured. The
    # measurements are the stage's own: read them during the call only.
    checked: Callable[[list[ProblemMeasurement], frozenset[str]], None] = _ignore


# (the stage's configuration, what it reports while it runs) -> the stage the pipeline runs
# after a good build.
StageFactory = Callable[[StageConfig, StageProgress], GpuStage]


@dataclass(frozen=True)
class Words:
    """Student-facing words of an assignment, used by worker.scoring in its reasons."""

    # A case route (ProblemMeasurement.routes) -> how its cases reached the student's code,
    # quoted after each failed case; a route not named here is quoted by its own name.
    routes: dict[str, str] = field(default_factory=dict)
    # A speed figure (ProblemMeasurement.figures) -> what its speedup compares, in the order the
    # notes list them; a rubric's speed_figure (and speed_fallback) names one of them.
    figures: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TimingReview:
    """What an assignment's own evidence of a problem's timing says (Plugin.review_timing, read by
    worker.scoring beside the engine's own checks of every timing)."""

    flags: list[str] = field(default_factory=list)  # for staff, shown to the student as notes
    withheld: bool = False  # the figure is not trusted: its speed points wait for staff (a flag says why)


# (the problem's scoring section, its measurement, the assignment's words) -> its TimingReview
TimingReviewer = Callable[["ProblemScoring", "ProblemMeasurement", Words], TimingReview]


@dataclass(frozen=True)
class Plugin:
    zip_folder: str  # the starter zip's top folder, as the course names the assignment's folder
    make_stage: StageFactory | None = None  # None: no stage, runs end `built`
    stage_needs_gpu: bool = True  # False: every worker runs the stage, with or without a GPU
    mutants_file: Path | None = None  # planted bugs the grading must catch (worker.mutants)
    words: Words = field(default_factory=Words)
    # What `grader calibrate` warns when, given no known-correct submissions, it times our kit.
    calibration_warning: str = "our reference kit, which is no student's code; prefer known-correct submissions"
    # Readers of what the stage records (worker.gpu_time): where a run's GPU time went, for staff,
    # and how much of a whole grade was timing, for the capacity model. None: the stage records none.
    gpu_time: GpuTimeReader | None = None
    timing_seconds: TimingReader | None = None
    # Its review of a timing's evidence, where its stage records any (hw4's gaming guards), and
    # the names of the settings a rubric's scoring section may give it (`review:`).
    review_timing: TimingReviewer | None = None
    review_settings: tuple[str, ...] = ()


def _stageless(rubric: Rubric) -> Plugin:
    return Plugin(zip_folder=rubric.slug)


def _import(plugin: str) -> object:
    """The module `plugin` names: a module name, or the absolute path of a .py file (imported
    once per process under a name of its own)."""
    if not plugin.endswith(".py"):
        return importlib.import_module(plugin)
    name = "kg_plugin_" + hashlib.sha256(plugin.encode()).hexdigest()[:16]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, plugin)
        if spec is None or spec.loader is None or not Path(plugin).is_file():
            raise ImportError(f"no Python file {plugin}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def load_plugin(plugin: str) -> Plugin:
    """The Plugin that the module `plugin` (a module name or a .py file) exposes as ASSIGNMENT."""
    try:
        module = _import(plugin)
    except ImportError as exc:
        raise AssignmentError(f"The assignment plug-in {plugin} cannot be imported ({exc}). "
                              "Name an importable module or a Python file in the rubric's plugin entry.") from exc
    found = getattr(module, PLUGIN_OBJECT, None)
    if not isinstance(found, Plugin):
        raise AssignmentError(f"The plug-in {plugin} has no {PLUGIN_OBJECT} of type worker.assignment.Plugin, "
                              "so it is not an assignment plug-in.")
    return found


def assignment_of(rubric: Rubric) -> Plugin:
    """The plug-in the rubric names (import cached by Python), or a stageless one; AssignmentError
    where the rubric scores a speed figure the plug-in does not measure, or gives its review a
    setting it does not have."""
    plugin = _stageless(rubric) if rubric.plugin is None else load_plugin(rubric.plugin)
    for problem in rubric.problems:
        named = (problem.scoring.speed_figure, problem.scoring.speed_fallback)
        unknown = [name for name in named if name is not None and name not in plugin.words.figures]
        if unknown:
            raise AssignmentError(f"Problem {problem.id} of the rubric {rubric.slug} scores the speed figure "
                                  f"{unknown[0]!r}, which its plug-in does not measure: name one of "
                                  f"{sorted(plugin.words.figures)} in its scoring section.")
        strange = sorted(set(problem.scoring.review) - set(plugin.review_settings))
        if strange:
            raise AssignmentError(f"Problem {problem.id} of the rubric {rubric.slug} sets the review setting "
                                  f"{strange[0]!r}, which its plug-in does not have: its settings are "
                                  f"{list(plugin.review_settings) or 'none'}.")
    return plugin
