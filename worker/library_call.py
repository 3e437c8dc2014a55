"""A problem that calls one function of the student's built library and times it against a
baseline function of our kit's: the GPU stage of a small assignment (tests/assignments/reduce,
rubrics/transpose) is its `LibraryProblem`, its child's call (worker.gpu.library_child) and its kit.

Two sandboxed children (worker.gpu.client) hold the cases' inputs on the GPU: one calls the
student's library in a copy of their built tree, the other our kit's baseline (the student's code
never shares a process with the baseline it is timed against, so it cannot slow it).
Correctness: the student's function on every case, its output read back through the arena and
checked here against the float64 `expected` (worker.checks). Speed, once every case passed: the
student's call against the baseline's on the timed case, in the trials every assignment shares
(worker.trials: warm-up, requests sized from it, rotated order, the stopping rule), on this
parent's clock, the output of every timed request checked. The cases take the route `library`
(ROUTE) and the ratio is the figure `baseline` (FIGURE), which the rubric's speed_figure names.
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from worker.assignment import GpuStage, Plugin, StageConfig, StageProgress, Words
from worker.checks import CheckResult, compare
from worker.gpu.budget import Deadline
from worker.gpu.client import ChildClient, ChildFailure, OutOfBudget, StageInfraError, StudentError
from worker.measurements import GPU_SNAPSHOT_KEYS, CaseOutcome, ProblemMeasurement, salient_lines
from worker.rubric import Rubric
from worker.sandbox import Sandbox
from worker.telemetry import gpu_snapshot
from worker.timing import RatioSummary, ratio_summary
from worker.trials import Progress, StoppingRule, calls_per_request, rotated, until_stopped

CHILD_MODULE = "worker.gpu.library_child"
OPERATIONS_IN_TREE = "kg_operations.py"
BASELINE_DIR = "kg_reference"  # our kit's library in the baseline child's tree
VARIANTS = ("baseline", "student")  # the timed pair: the baseline first in trial 0, then rotated
ROUTE, FIGURE = "library", "baseline"  # the measurement's one case route and one speed figure
READY_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Case:
    case_id: str
    shape: tuple[int, ...]  # the input's
    public: bool


@dataclass(frozen=True)
class LibraryProblem:
    """What an assignment of one library call declares."""

    problem_id: str
    operations: Path  # its child's operations file: imports worker.gpu.library_child and declares the call
    library: str  # the built library, relative to a built tree (the student's, and our kit's)
    function: str  # the student's function in it
    baseline: str  # our kit's function the student's is timed against
    cases: tuple[Case, ...]
    timed: Case  # one of `cases`
    make_input: Callable[[np.random.Generator, Case], np.ndarray]  # float32, of the case's shape
    expected: Callable[[np.ndarray], np.ndarray]  # an input's right output, float64
    tolerance: Callable[[np.ndarray], float]  # the absolute error an input's output may have
    request_ms: float = 20.0  # one timed request lasts about this long (its round trip a small part)
    max_calls: int = 2000
    min_trials: int = 5
    max_trials: int = 30
    max_relative_width: float = 0.10

    def inputs(self, seed: int | None) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {c.case_id: self.make_input(rng, c) for c in self.cases}

    def check(self, got: np.ndarray, values: np.ndarray, expected: np.ndarray | None = None) -> CheckResult:
        """One output against the float64 expected one (worker.checks' verdict and message);
        `expected`: that output, computed once for many checks of one input."""
        right = self.expected(values) if expected is None else expected
        return compare({"out": (got, right)}, self.tolerance(values), 0.0, values.shape)


class WrongTimedOutput(Exception):
    """An output of a timed request was wrong: the figure cannot stand."""


class _Child:
    """One sandboxed child calling one library's function on the inputs it holds."""

    def __init__(self, problem: LibraryProblem, client: ChildClient, library: str, function: str,
                 shapes: dict[str, tuple[int, ...]]) -> None:
        self.problem, self.client, self.library, self.function, self.shapes = problem, client, library, function, shapes

    def run(self, case_id: str, calls: int) -> float:
        """Seconds on this parent's clock of `calls` calls on the case (then one synchronize)."""
        message = {"op": "call", "library": self.library, "function": self.function, "case": case_id,
                   "calls": calls, "shape": list(self.shapes[case_id])}
        _, seconds = self.client.timed_call(message, CALL_TIMEOUT_S)
        return seconds

    def output(self, case_id: str) -> np.ndarray:
        """The case's last output, read back through the arena."""
        self.client.arena.reset()  # the inputs are on the GPU: the arena only carries outputs now
        ref = self.client.arena.alloc(self.shapes[case_id])
        self.client.call({"op": "read", "case": case_id, "out": ref.to_json()}, CALL_TIMEOUT_S)
        return self.client.arena.view(ref).copy()


def start_child(problem: LibraryProblem, tree: Path, config: StageConfig, deadline: Deadline,
                inputs: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]], library: str,
                function: str) -> _Child:
    """A sandboxed child in `tree` (the operations copied in), its CUDA up and `inputs` on its
    GPU, each case's output of its shape in `shapes`: all our side, before any library of the
    tree is loaded (on its first call)."""
    shutil.copyfile(problem.operations, tree / OPERATIONS_IN_TREE)
    arena = max(sum(v.nbytes for v in inputs.values()), max(4 * int(np.prod(shapes[c])) for c in inputs))
    client = ChildClient(Sandbox(config.limits, config.policy), tree, (CHILD_MODULE, str(tree / OPERATIONS_IN_TREE)),
                         arena + 4096 * (len(inputs) + 1), config.policy.gpu_index, deadline=deadline)
    try:
        client.call({"op": "ready", "cuda": True}, READY_TIMEOUT_S)
        for case_id, values in inputs.items():
            client.call({"op": "put", "case": case_id, "input": client.arena.put(values).to_json()}, READY_TIMEOUT_S)
    except (ChildFailure, StudentError) as exc:
        client.close()
        said = salient_lines(exc.tail if isinstance(exc, ChildFailure) else exc.trace)
        raise StageInfraError(f"a child of the {problem.function} stage did not start: {exc}: {' | '.join(said)}") from exc
    return _Child(problem, client, library, function, shapes)


def run_checks(problem: LibraryProblem, child: _Child, inputs: dict[str, np.ndarray],
               expected: dict[str, np.ndarray]) -> list[CaseOutcome]:
    outcomes = []
    for case in problem.cases:
        try:
            child.run(case.case_id, 1)
            got = child.output(case.case_id)
        except StudentError as exc:  # a CUDA error in the kernel, say: the case fails with it
            outcomes.append(CaseOutcome(case.case_id, case.shape, False, message=exc.error, public=case.public))
            continue
        result = problem.check(got, inputs[case.case_id], expected[case.case_id])
        outcomes.append(CaseOutcome(case.case_id, case.shape, result.ok, result.max_err, result.where, result.message,
                                    case.public))
    return outcomes


def _timed(children: dict[str, _Child], variant: str, calls: int) -> float:
    """Seconds of `calls` calls by `variant` on the timed case. Our baseline child failing (the
    budget aside) is an infrastructure fault, never the student's."""
    child = children[variant]
    try:
        return child.run(child.problem.timed.case_id, calls)
    except (ChildFailure, StudentError) as exc:
        if variant == "student" or isinstance(exc, OutOfBudget):
            raise
        raise StageInfraError(f"our baseline {child.function} failed while timed: {exc}") from exc


def time_against_baseline(problem: LibraryProblem, children: dict[str, _Child], values: np.ndarray,
                          expected: np.ndarray, rule: StoppingRule) -> tuple[RatioSummary, dict[str, object]]:
    """The speedup of the student's function over the baseline on the timed case, and how it was measured."""
    warm_ms = {}
    for variant in VARIANTS:  # the first call loads; the second sizes the requests
        for _ in range(2):
            seconds = _timed(children, variant, 1)
        warm_ms[variant] = seconds * 1e3
    calls = {v: calls_per_request(warm_ms[v], problem.request_ms, problem.max_calls) for v in VARIANTS}
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    started = time.monotonic()

    def trial() -> Progress:
        trial_started, done = time.monotonic(), len(times["student"])
        for variant in rotated(VARIANTS, done):
            seconds = _timed(children, variant, calls[variant])
            result = problem.check(children[variant].output(problem.timed.case_id), values, expected)
            if not result.ok:
                raise WrongTimedOutput(f"a timed {variant} output was wrong: {result.message}")
            times[variant].append(seconds * 1e3 / calls[variant])
        now = time.monotonic()
        return Progress(done + 1, ratio_summary(times["baseline"], times["student"]), now - started, now - trial_started)

    stop, last = until_stopped(rule, trial)
    assert last.summary is not None
    return last.summary, {"trials": last.trials, "stopped": stop, "calls_per_request": calls,
                          "median_ms": {v: float(np.median(t)) for v, t in times.items()}}


def _stopped(failure: ChildFailure) -> str:
    return "not_run" if isinstance(failure, OutOfBudget) else ("timeout" if failure.kind == "timeout" else "crashed")


def measure(problem: LibraryProblem, rubric: Rubric, config: StageConfig, staged: Path, reference: Path,
            work_dir: Path, progress: StageProgress) -> ProblemMeasurement:
    pid = problem.problem_id
    student_tree, baseline_tree = work_dir / f"problem-{pid}", work_dir / f"problem-{pid}-baseline"
    shutil.copytree(staged, student_tree)
    (baseline_tree / BASELINE_DIR / problem.library).parent.mkdir(parents=True)
    shutil.copyfile(reference / problem.library, baseline_tree / BASELINE_DIR / problem.library)
    inputs = problem.inputs(config.seed)
    expected = {case_id: problem.expected(values) for case_id, values in inputs.items()}  # once: 128 MB for 4096^2
    shapes = {case_id: tuple(right.shape) for case_id, right in expected.items()}
    telemetry: dict[str, object] = {GPU_SNAPSHOT_KEYS[0]: gpu_snapshot(config.policy.gpu_index or 0)}
    spec = next(p for p in rubric.problems if p.id == pid).scoring
    rule = StoppingRule(problem.min_trials, problem.max_trials, problem.max_relative_width, spec.thresholds(),
                        config.budget_s)
    measured, deadline = ProblemMeasurement(pid, telemetry=telemetry), Deadline(config.budget_s)
    with ExitStack() as stack:
        student = start_child(problem, student_tree, config, deadline, inputs, shapes, problem.library,
                              problem.function)
        stack.callback(student.client.close)
        try:
            measured.routes[ROUTE] = run_checks(problem, student, inputs, expected)
            timed = measured.all_passed  # a failed case forfeits speed
            progress.checked([measured], frozenset({pid}) if timed else frozenset())
            if timed:
                case = problem.timed.case_id
                baseline = start_child(problem, baseline_tree, config, deadline, {case: inputs[case]}, shapes,
                                       f"{BASELINE_DIR}/{problem.library}", problem.baseline)
                stack.callback(baseline.client.close)
                measured.figures[FIGURE], telemetry["timing"] = time_against_baseline(
                    problem, {"student": student, "baseline": baseline}, inputs[case], expected[case], rule)
        except ChildFailure as failure:
            measured.status, measured.log_tail = _stopped(failure), f"{failure.detail}\n{failure.tail}"
        except (StudentError, WrongTimedOutput) as exc:
            measured.status, measured.log_tail = "error", str(exc)
    return measured


def make_stage(problem: LibraryProblem) -> Callable[[StageConfig, StageProgress], GpuStage]:
    """A plug-in's `make_stage` for the one problem."""

    def make(config: StageConfig, progress: StageProgress) -> GpuStage:
        def stage(rubric: Rubric, staged: Path, reference: Path, work_dir: Path,
                  problems: tuple[str, ...]) -> list[ProblemMeasurement]:
            if problem.problem_id not in problems:
                return []
            progress.problem(problem.problem_id)
            return [measure(problem, rubric, config, staged, reference, work_dir, progress)]

        return stage

    return make


def library_plugin(problem: LibraryProblem, zip_folder: str) -> Plugin:
    """The plug-in of an assignment of one library call: its stage, its mutant set (mutants.yaml
    beside its call file) and its words, all said in the function's and the baseline's names."""
    return Plugin(
        zip_folder=zip_folder,
        make_stage=make_stage(problem),
        mutants_file=problem.operations.with_name("mutants.yaml"),
        words=Words(routes={ROUTE: f"{problem.function} called directly"},
                    figures={FIGURE: f"your {problem.function} vs the starter's {problem.baseline}"}),
        calibration_warning=f"our reference kit's {problem.function}, which is no student's code",
    )
