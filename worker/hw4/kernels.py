"""Parent-side grading of hw4's kernel problems (1.1, 1.2, 2.1, 2.2).

For each problem the trusted parent draws fresh inputs, computes float64 references, and asks
a sandboxed child (one per problem) to run the student's code: first through the C ABI of the
built .so on every rubric case, then through the student's MiniTorch binding (the checks:
worker.hw4.kernel_checks); then, in a fresh
child, the timing trials of worker.hw4.speed (the course's shapes and definition, with our
basic ops swapped in beside the student's own). The clock is the parent's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from worker.affinity import TimingCpus, this_thread_on
from worker.gpu.client import ChildClient, ChildFailure, StudentError
from worker.hw4.case_inputs import make_inputs
from worker.hw4.cases import Case
from worker.hw4.kernel_checks import Check, case_json, check_outcome, crash_outcome, plan_checks, run_check
from worker.hw4.speed import (
    TIMING_CASES,
    Sides,
    TimingConfig,
    describe_timing,
    time_problem,
    warm_sides,
    warm_student,
)
from worker.measurements import CaseOutcome, ProblemMeasurement

HANDLERS = ("worker.hw4.child_kernels",)


def measure_kernel_ms(client: ChildClient, case: Case, rng: np.random.Generator,
                      config: TimingConfig) -> tuple[float | None, str]:
    """The fused kernels' own GPU time per C ABI call (CUPTI, in the child), or None and why.
    Informational: a profiler that is missing or refuses, or a kernel that crashes or hangs
    there (the checks say so), is not scored."""
    client.arena.reset()
    refs = client.arena.put_all(make_inputs(case, rng))
    try:
        reply = client.call({"op": "kernel_time", "case": case_json(case), "arrays": refs,
                             "calls": config.kernel_calls}, config.call_timeout_s)
    except StudentError as exc:
        return None, f"kernel GPU time not measured: {exc.error}"
    except ChildFailure as exc:
        return None, f"kernel GPU time not measured: {exc}"
    return float(reply["kernel_ms"]), ", ".join(reply.get("kernels", []))


ClientFactory = Callable[[str], ChildClient]  # label -> a fresh sandboxed child


class Stopwatch:
    """`with clock("phase"):` adds the phase's wall seconds to the given dict."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[phase] = round(self.seconds.get(phase, 0.0) + time.monotonic() - started, 3)


# Fresh children per problem and path (C ABI, binding) after checks that killed the child, or
# hung it (each hang costs the call's timeout); past either, that path's other checks are not
# run. Per path: a launcher whose signature differs from the starter's crashes every C ABI
# call, and the binding checks, the course's own path, still deserve their run.
MAX_CRASHES = 6
MAX_HANGS = 2


@dataclass
class KernelProblem:
    """One kernel problem on its way through the two phases of `grade_kernel_problems`."""

    problem_id: str
    checks: list[Check]  # still to run, in order
    thresholds: tuple[float, ...]  # speedups where a point changes: measure until clear of them
    rng: np.random.Generator  # its own stream: the checks of several problems run in threads
    profile_rng: np.random.Generator  # the kernel profile's, which runs beside the checks
    measurement: ProblemMeasurement
    clock: Stopwatch
    client: ChildClient | None = None  # open while the problem still has something to measure
    profiler: ChildClient | None = None  # a second child, for the kernel profile only
    timer: ChildClient | None = None  # a third, fresh one for the timing, warmed during the checks
    # checks that killed ("crashed") or hung ("timeout") the child, per path
    failures: dict[tuple[str, str], int] = field(default_factory=dict)

    def out_of_children(self, path: str) -> str | None:
        crashes, hangs = self.failures.get((path, "crashed"), 0), self.failures.get((path, "timeout"), 0)
        if crashes >= MAX_CRASHES or hangs >= MAX_HANGS:
            return f"not run: the code crashed on {crashes} and hung on {hangs} earlier cases of this path"
        return None

    def record(self, outcome: CaseOutcome, check: Check) -> None:
        cases = self.measurement.abi_cases if check.path == "abi" else self.measurement.binding_cases
        cases.append(outcome)

    @property
    def public_passed(self) -> bool:
        public = [c for c in self.measurement.cases if c.public]
        return bool(public) and all(c.ok for c in public)


def _close_client(problem: KernelProblem) -> None:
    if problem.client is not None:
        problem.client.close()
        problem.client = None


@contextlib.contextmanager
def _ends_on_failure(problem: KernelProblem, during: str) -> Iterator[None]:
    """A crash, hang or raise of the submission's code during its timing ends the problem;
    the log says what it was doing (`during`), as the course's harness would have crashed
    on that very call."""
    m = problem.measurement
    try:
        yield
    except ChildFailure as exc:
        m.status = exc.kind
        m.log_tail = f"{exc.detail} {during}\n{exc.tail}"[-8000:]
    except StudentError as exc:
        m.status = "error"
        m.log_tail = f"{exc.error} {during}\n{exc.trace}"[-8000:]
    else:
        return
    _finish(problem)


def _finish(problem: KernelProblem) -> None:
    """Close the problem's (checking, timed) child; the profiler closes its own."""
    _close_client(problem)
    failed = problem.measurement.failed_cases
    problem.measurement.first_failure = failed[0] if failed else None


def check_phase(problem: KernelProblem, config: TimingConfig) -> None:
    """Run the problem's pending checks in its child until they are done or one crashes or
    hangs the child: that check fails with what the child said, the child is gone, and the
    caller gives the problem a fresh one for the rest (`needs_fresh_child`). Safe to run
    beside other problems' checks and profiles: nothing here is a speedup."""
    assert problem.client is not None
    while problem.checks and problem.client is not None:
        check = problem.checks.pop(0)
        exhausted = problem.out_of_children(check.path)
        if exhausted:
            problem.record(check_outcome(check, False, None, None, exhausted), check)
            continue
        with problem.clock(f"{check.path}_cases"):
            try:
                outcome = run_check(problem.client, check, config.call_timeout_s)
            except ChildFailure as exc:
                outcome = crash_outcome(check, exc)
                key = (check.path, exc.kind)
                problem.failures[key] = problem.failures.get(key, 0) + 1
                _close_client(problem)
        problem.record(outcome, check)


def needs_fresh_child(problem: KernelProblem) -> bool:
    """Whether the problem's child is gone with checks left to run; checks of a path that has
    used up its fresh children are recorded as not run first (no child is started for them)."""
    for check in [c for c in problem.checks if problem.out_of_children(c.path)]:
        problem.checks.remove(check)
        problem.record(check_outcome(check, False, None, None, problem.out_of_children(check.path) or ""), check)
    return problem.client is None and bool(problem.checks)


def ready_for_timing(problem: KernelProblem) -> bool:
    """No speed points without the course's own cases passing: a problem whose public cases
    failed spends no GPU time on timing (a failed hidden case costs only its share)."""
    if not problem.public_passed:
        if problem.measurement.log_tail == "":
            problem.measurement.log_tail = "not timed: a public correctness case failed"
        return False
    return True


def profile_phase(problem: KernelProblem, config: TimingConfig) -> None:
    """The kernels' own GPU time, in the problem's second child, beside its checks: CUPTI's
    start-up takes seconds, which the checks then hide."""
    profiler, m = problem.profiler, problem.measurement
    assert profiler is not None
    try:
        with problem.clock("kernel_profile"):
            m.kernel_ms, m.telemetry["kernel_profile"] = measure_kernel_ms(
                profiler, max(TIMING_CASES[problem.problem_id], key=lambda c: math.prod(c.shape)),
                problem.profile_rng, config)
    finally:
        problem.profiler = None
        profiler.close()


def warm_phase(problem: KernelProblem, config: TimingConfig) -> None:
    """The timing child's one-time costs (seconds: imports, CUDA context) paid beside the
    checks. If the submission's code fails there, the child is closed and the timing gets a
    fresh one, where the failure, if it repeats, ends the problem as it would have."""
    timer = problem.timer
    assert timer is not None
    try:
        with problem.clock("timing_warm"):
            warm_student(timer, problem.problem_id, config.call_timeout_s)
    except (ChildFailure, StudentError):
        problem.timer = None
        timer.close()


def timing_phase(problem: KernelProblem, sides: Sides, config: TimingConfig) -> None:
    """The speedups, with nothing else of this grade running (the caller freezes the others)."""
    client, m, cases = problem.client, problem.measurement, TIMING_CASES[problem.problem_id]
    assert client is not None
    shapes = ", ".join(c.describe_shape() for c in cases)
    during = f"(while timing your fused op and your MiniTorch's composition on the course's shapes: {shapes})"
    with _ends_on_failure(problem, during):
        with problem.clock("timing"):
            timing = time_problem(client, sides, cases, problem.rng, config, problem.thresholds)
        m.speedup_student, m.speedup_reference_ops, m.speedup_trusted = (
            timing.student, timing.reference_ops, timing.kit)
        m.telemetry.update(timing_shapes=timing.shapes, timing_evidence=timing.evidence,
                           timing_dropped=timing.dropped, timing_stopped=timing.stopped,
                           timing_thresholds=list(problem.thresholds), timed=describe_timing(cases))
        if timing.wrong_trials:
            m.binding_cases.append(CaseOutcome(
                case_id="timing:course-shapes", shape=tuple(cases[0].shape), ok=False,
                message=f"{timing.wrong_trials} timed trial(s) returned a wrong result", public=True))


@contextlib.contextmanager
def _placed_for_timing(student: ChildClient, sides: Sides, cpus: TimingCpus | None) -> Iterator[None]:
    """The clock's thread on one fixed core, the timed children (the submission's and the
    sides) taking turns on another (or both left alone): worker.affinity says why."""
    if cpus is None:
        yield
        return
    student.pin({cpus.timed})
    for client in sides.clients.values():
        if client is not None:
            client.pin({cpus.timed})
    with this_thread_on(cpus.parent):
        yield


def grade_kernel_problems(
    problems: list[tuple[str, list[Case], tuple[float, ...]]],
    open_student: ClientFactory,
    sides: Sides,
    rng: np.random.Generator,
    config: TimingConfig,
    telemetry: Callable[[], dict[str, Any]] = dict,
    on_problem: Callable[[str], None] = lambda _pid: None,
    cpus: TimingCpus | None = None,
) -> list[ProblemMeasurement]:
    """Every kernel problem (id, cases, thresholds), each in a fresh child of its own.

    Phase 1 runs the correctness checks and kernel profiles of all problems at once, each
    profile in a second child of its problem (they only compete for time, which they do not
    measure), and pays the one-time costs of the timing children (a third child per problem,
    which runs no check, and the side children). A check that crashes or hangs the child fails
    with what the child said, and the problem's remaining checks continue in a fresh child (up
    to MAX_CRASHES / MAX_HANGS per path). Phase 2 times, each in its timing child, the
    problems whose public cases all passed, one after another, the other children frozen
    meanwhile, so no code of this submission runs beside a timing; with `cpus`, on the same
    two cores every grade."""
    seeds = rng.integers(2**63 - 1, size=(len(problems), 3))
    states = [KernelProblem(pid, plan_checks(cases, np.random.default_rng(int(seed[2]))), thresholds,
                            np.random.default_rng(int(seed[0])), np.random.default_rng(int(seed[1])),
                            ProblemMeasurement(pid, telemetry={"before": telemetry()}), Stopwatch({}))
              for (pid, cases, thresholds), seed in zip(problems, seeds)]
    for problem in states:
        problem.measurement.telemetry["seconds"] = problem.clock.seconds  # where its wall time went

    def fresh_child(problem: KernelProblem) -> None:
        # Only ever from this thread, with no other thread spawning: fork + exec is not thread-safe.
        with problem.clock("start"):
            problem.client = open_student(problem.problem_id)

    try:
        for problem in states:
            fresh_child(problem)
            with problem.clock("start"):
                problem.profiler = open_student(f"{problem.problem_id}-profile")
                problem.timer = open_student(f"{problem.problem_id}-timing")
        if states:
            on_problem(states[0].problem_id)
        with ThreadPoolExecutor(max_workers=max(1, 3 * len(states) + 1)) as pool:
            # beside the checks: profiles and the warming of the timing children (never a timing)
            aside = [pool.submit(profile_phase, problem, config) for problem in states]
            aside += [pool.submit(warm_phase, problem, config) for problem in states]
            aside.append(pool.submit(warm_sides, sides, config.call_timeout_s))
            rounds = states
            while rounds:  # a crash ends its child: the problem's remaining checks get a fresh one
                for done in [pool.submit(check_phase, problem, config) for problem in rounds]:
                    done.result()
                rounds = [p for p in states if needs_fresh_child(p)]
                for done in aside if rounds else ():
                    done.result()  # no other thread running while this thread spawns
                for problem in rounds:
                    fresh_child(problem)
            for done in aside:
                done.result()
        waiting = [p for p in states if ready_for_timing(p)]
        for problem in states:
            _finish(problem)
            timer, problem.timer = problem.timer, None
            if problem not in waiting:
                if timer is not None:
                    timer.close()
            elif timer is not None:  # fresh: it ran no check (a hidden case may break a CUDA context)
                problem.client = timer
            else:
                fresh_child(problem)
        for problem in waiting:
            problem.client.pause()  # type: ignore[union-attr]
        for problem in waiting:
            on_problem(problem.problem_id)
            problem.client.resume()  # type: ignore[union-attr]
            problem.measurement.telemetry["timing_cpus"] = dataclasses.asdict(cpus) if cpus else None
            with _placed_for_timing(problem.client, sides, cpus):  # type: ignore[arg-type]
                timing_phase(problem, sides, config)
            _finish(problem)
            problem.measurement.telemetry["after"] = telemetry()
    finally:
        for problem in states:
            _finish(problem)
            for child in (problem.profiler, problem.timer):  # opened, but phase 1 never ran
                if child is not None:
                    child.close()
            problem.profiler = problem.timer = None
            problem.measurement.telemetry.setdefault("after", telemetry())
    return [p.measurement for p in states]
