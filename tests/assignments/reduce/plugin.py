"""reduce's plug-in (its rubric.yaml names this module): a GPU stage built only from the engine's
generic parts, so that an assignment other than hw4 is graded on a GPU with no edit to them.

A sandboxed child (worker.gpu.client, with gpu_child.py's operations) holds every case's input
on the GPU. Correctness: reduce_sum of the student's library on each case, checked here against
a float64 sum (worker.checks). Speed, once every case passed: reduce_sum against
reduce_sum_naive of our own kit, in a second child, on the largest case, in the trials every
assignment shares (worker.trials: warm-up, calls sized per request, rotated order, the stopping
rule), on this parent's clock, every timed sum checked; the ratio is the measurement's
`speedup_reference_ops`, which the rubric's speed figure scores.
"""
from __future__ import annotations

import shutil
import time
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

PROBLEM = "1"
# The child's operations, copied into its tree (the sandbox shows nothing of this folder, whose
# starter/ is our solution) and imported there from that file (worker.gpu.child).
CHILD_OPERATIONS = Path(__file__).with_name("gpu_child.py")
OPERATIONS_IN_TREE = "kg_reduce_operations.py"
REFERENCE_LIBRARY = "kg_reference/reduce.so"  # our kit's library in the naive child's tree: reduce_sum_naive comes from it
VARIANTS = ("naive", "student")  # the timed pair: baseline first in trial 0, then rotated


@dataclass(frozen=True)
class Case:
    case_id: str
    n: int
    public: bool


CASES = (Case("n1", 1, True), Case("n31", 31, True), Case("n4097", 4097, True),
         Case("n1048579", 2**20 + 3, False), Case("n16777216", 2**24, False))
TIMED = CASES[-1]
ARENA_BYTES = 4 * sum(c.n for c in CASES) + 4096 * len(CASES)
# Each value is a nonzero multiple of 1/8 in [-4, 4]: the partial sums of any order stay exact
# in float32 far beyond these lengths, so one element dropped is always an error, and the
# tolerance (relative to the sum of magnitudes) only has to absorb a rare rounding.
RELATIVE_TOLERANCE = 1e-6
READY_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 30.0
REQUEST_MS = 20.0  # one timed request lasts about this long (its round trip a small part of it)
MAX_CALLS = 2000
MIN_TRIALS, MAX_TRIALS, MAX_RELATIVE_WIDTH = 5, 30, 0.10


def make_inputs(seed: int | None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c.case_id: (rng.integers(1, 33, c.n) * rng.choice((-1, 1), c.n) / 8).astype(np.float32) for c in CASES}


def check_sum(got: float, values: np.ndarray, shape: tuple[int, ...]) -> CheckResult:
    """One reduction's result against the float64 sum (worker.checks' verdict and message)."""
    expected = np.array([values.astype(np.float64).sum()])
    atol = RELATIVE_TOLERANCE * float(np.abs(values).sum(dtype=np.float64))
    return compare({"sum": (np.array([got]), expected)}, atol, 0.0, shape)


def _sum_of(reply: dict[str, object]) -> float:
    return float(reply["sum"])  # type: ignore[arg-type]  # a number, or "nan"/"inf" written as text


def run_checks(child: ChildClient, inputs: dict[str, np.ndarray]) -> list[CaseOutcome]:
    outcomes = []
    for case in CASES:
        shape = (case.n,)
        try:
            got = _sum_of(child.call({"op": "sum", "variant": "student", "case": case.case_id, "calls": 1},
                                     CALL_TIMEOUT_S))
        except StudentError as exc:  # a CUDA error in the kernel, say: the case fails with it
            outcomes.append(CaseOutcome(case.case_id, shape, False, message=exc.error, public=case.public))
            continue
        result = check_sum(got, inputs[case.case_id], shape)
        outcomes.append(CaseOutcome(case.case_id, shape, result.ok, result.max_err, result.where, result.message,
                                    case.public))
    return outcomes


class WrongTimedSum(Exception):
    """A sum returned during timing was wrong: the figure cannot stand."""


def _timed_sum(children: dict[str, ChildClient], variant: str, calls: int) -> tuple[float, float]:
    """(the last sum, seconds on this parent's clock) of `calls` reductions by `variant`. Our
    naive child failing (the budget aside) is an infrastructure fault, never the student's."""
    message = {"op": "sum", "variant": variant, "case": TIMED.case_id, "calls": calls}
    try:
        reply, seconds = children[variant].timed_call(message, CALL_TIMEOUT_S)
    except (ChildFailure, StudentError) as exc:
        if variant == "student" or isinstance(exc, OutOfBudget):
            raise
        raise StageInfraError(f"our naive reduction failed while timed: {exc}") from exc
    return _sum_of(reply), seconds


def time_against_naive(children: dict[str, ChildClient], values: np.ndarray,
                       rule: StoppingRule) -> tuple[RatioSummary, dict[str, object]]:
    """The speedup of reduce_sum over reduce_sum_naive on TIMED's input, and how it was measured."""
    warm_ms = {}
    for variant in VARIANTS:  # the first call loads; the second sizes the requests
        for _ in range(2):
            _, seconds = _timed_sum(children, variant, 1)
        warm_ms[variant] = seconds * 1e3
    calls = {v: calls_per_request(warm_ms[v], REQUEST_MS, MAX_CALLS) for v in VARIANTS}
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    started = time.monotonic()

    def trial() -> Progress:
        trial_started, done = time.monotonic(), len(times["student"])
        for variant in rotated(VARIANTS, done):
            got, seconds = _timed_sum(children, variant, calls[variant])
            result = check_sum(got, values, (TIMED.n,))
            if not result.ok:
                raise WrongTimedSum(f"a timed {variant} sum was wrong: {result.message}")
            times[variant].append(seconds * 1e3 / calls[variant])
        now = time.monotonic()
        return Progress(done + 1, ratio_summary(times["naive"], times["student"]), now - started, now - trial_started)

    stop, last = until_stopped(rule, trial)
    assert last.summary is not None
    return last.summary, {"trials": last.trials, "stopped": stop, "calls_per_request": calls,
                          "median_ms": {v: float(np.median(t)) for v, t in times.items()}}


def _stopped(failure: ChildFailure) -> str:
    return "not_run" if isinstance(failure, OutOfBudget) else ("timeout" if failure.kind == "timeout" else "crashed")


def start_child(tree: Path, config: StageConfig, deadline: Deadline, inputs: dict[str, np.ndarray]) -> ChildClient:
    """A sandboxed child in `tree` (our operations copied in), its CUDA up and `inputs` on its
    GPU: all our side, before any library of the tree is loaded (on its first `sum`)."""
    shutil.copyfile(CHILD_OPERATIONS, tree / OPERATIONS_IN_TREE)
    child = ChildClient(Sandbox(config.limits, config.policy), tree, (str(tree / OPERATIONS_IN_TREE),),
                        ARENA_BYTES, config.policy.gpu_index, deadline=deadline)
    try:
        child.call({"op": "ready", "cuda": True}, READY_TIMEOUT_S)
        for case_id, values in inputs.items():
            child.call({"op": "put", "case": case_id, "input": child.arena.put(values).to_json()}, READY_TIMEOUT_S)
    except (ChildFailure, StudentError) as exc:
        child.close()
        said = salient_lines(exc.tail if isinstance(exc, ChildFailure) else exc.trace)
        raise StageInfraError(f"a child of the reduce stage did not start: {exc}: {' | '.join(said)}") from exc
    return child


def measure(rubric: Rubric, config: StageConfig, staged: Path, reference: Path, work_dir: Path,
            progress: StageProgress) -> ProblemMeasurement:
    """The student's library in one child, our naive one in another (the student's code never
    shares a process with the baseline it is timed against, so it cannot slow it)."""
    student_tree, naive_tree = work_dir / f"problem-{PROBLEM}", work_dir / f"problem-{PROBLEM}-naive"
    shutil.copytree(staged, student_tree)
    (naive_tree / REFERENCE_LIBRARY).parent.mkdir(parents=True)
    shutil.copyfile(reference / "lib" / "reduce.so", naive_tree / REFERENCE_LIBRARY)
    inputs = make_inputs(config.seed)
    telemetry: dict[str, object] = {GPU_SNAPSHOT_KEYS[0]: gpu_snapshot(config.policy.gpu_index or 0)}
    spec = next(p for p in rubric.problems if p.id == PROBLEM).scoring
    rule = StoppingRule(MIN_TRIALS, MAX_TRIALS, MAX_RELATIVE_WIDTH, spec.thresholds(), config.budget_s)
    measured, deadline = ProblemMeasurement(PROBLEM, telemetry=telemetry), Deadline(config.budget_s)
    with ExitStack() as children:
        student = children.enter_context(start_child(student_tree, config, deadline, inputs))
        try:
            measured.abi_cases = run_checks(student, inputs)
            timed = measured.all_passed  # the rubric has no hidden points: a failed case forfeits speed
            progress.checked([measured], frozenset({PROBLEM}) if timed else frozenset())
            if timed:
                naive = children.enter_context(
                    start_child(naive_tree, config, deadline, {TIMED.case_id: inputs[TIMED.case_id]}))
                measured.speedup_reference_ops, telemetry["timing"] = time_against_naive(
                    {"student": student, "naive": naive}, inputs[TIMED.case_id], rule)
        except ChildFailure as failure:
            measured.status, measured.log_tail = _stopped(failure), f"{failure.detail}\n{failure.tail}"
        except (StudentError, WrongTimedSum) as exc:
            measured.status, measured.log_tail = "error", str(exc)
    return measured


def make_stage(config: StageConfig, progress: StageProgress) -> GpuStage:
    def stage(rubric: Rubric, staged: Path, reference: Path, work_dir: Path,
              problems: tuple[str, ...]) -> list[ProblemMeasurement]:
        if PROBLEM not in problems:
            return []
        progress.problem(PROBLEM)
        return [measure(rubric, config, staged, reference, work_dir, progress)]

    return stage


ASSIGNMENT = Plugin(
    zip_folder="reduce",
    make_stage=make_stage,
    mutants_file=Path(__file__).with_name("mutants.yaml"),
    words=Words(case_routes=("reduce_sum called directly", "your code"),
                figures={"reference_ops": "your reduce_sum vs the starter's reduce_sum_naive",
                         "student": "your reduce_sum vs the starter's reduce_sum_naive"}),
    calibration_warning="our reference kit's reduce_sum, which is no student's code",
)
