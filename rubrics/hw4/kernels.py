"""Parent-side grading of hw4's kernel problems (1.1, 1.2, 2.1, 2.2).

For each problem the trusted parent draws fresh inputs, computes float64 references, and asks
a sandboxed child (one per problem) to run the student's code: first through the C ABI of the
built .so on every rubric case, then through the student's MiniTorch binding (the checks:
rubrics.hw4.kernel_checks); then, in a fresh
child, the timing trials of rubrics.hw4.speed (the course's shapes and definition, with our
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

from rubrics.hw4.abi import library_of, traffic_bytes
from rubrics.hw4.cases import Case
from rubrics.hw4.hangs import LauncherHung, binding_calls
from rubrics.hw4.kernel_checks import Check, crash_outcome, measure_kernel_ms, not_run_outcome, plan_checks, run_check
from rubrics.hw4.loading import MINITORCH, LoadGate
from rubrics.hw4.speed import (
    TIMING_CASES,
    Sides,
    TimingConfig,
    describe_timing,
    measure_copy_peak,
    time_problem,
    warm_sides,
    warm_student,
)
from worker.affinity import TimingCpus, this_thread_on
from worker.assignment import StageProgress
from worker.gpu.client import ChildClient, ChildFailure, OutOfBudget, StudentError
from worker.gpu.gpu_lock import GpuTurns
from worker.gpu_conditions import ConditionsWatch, GpuConditions
from worker.measurements import (
    BANDWIDTH_KEY,
    CONDITIONS_KEY,
    COPY_PEAK_KEY,
    SANDBOX_REFUSED_KEY,
    Bandwidth,
    CaseOutcome,
    ProblemMeasurement,
)
from worker.pieces import mark_timing_pending
from worker.states import Piece

HANDLERS = ("rubrics.hw4.child_kernels",)
# A kernel problem to run: its id, its cases, the speedups where its points change, the
# built libraries it loads.
KernelSpec = tuple[str, list[Case], tuple[float, ...], tuple[str, ...]]


ClientFactory = Callable[[str], ChildClient]  # label -> a fresh sandboxed child


def paths_parts(kind: str, needs: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """What each path of a problem loads of the submission: the C ABI only the library of its
    launchers; the binding the libraries the problem needs (the rubric's `needs:`: its fused
    op and the basic ops) and the minitorch package."""
    return {"abi": (library_of(kind),), "binding": (*needs, MINITORCH)}


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
# call, and the binding checks, the course's own path, still deserve their run. A hang in a
# launcher names it for the whole stage at once (rubrics.hw4.hangs); MAX_HANGS bounds the
# hangs no launcher is blamed for (the binding making its tensors).
MAX_CRASHES = 6
MAX_HANGS = 2


@dataclass
class KernelProblem:
    """One kernel problem on its way through the two phases of `grade_kernel_problems`."""

    problem_id: str
    kind: str  # its cases' kind: the launcher its C ABI cases call (rubrics.hw4.abi)
    checks: list[Check]  # still to run, in order
    gate: LoadGate  # whether what a path needs loads, and whether the run's budget is left
    parts: dict[str, tuple[str, ...]]  # path -> what it loads of the submission (`paths_parts`)
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
    # C ABI checks that ran and failed (wrong, raised, crashed or hung): rubrics.hw4.sanitize's
    failed_abi: list[Check] = field(default_factory=list)

    def why_not(self, check: Check) -> str | None:
        """Why `check` is not run (a part its path needs does not load, the run's budget is
        used up, a launcher it calls hung, or its path used up its fresh children), or None."""
        path = check.path
        blocked = self.gate.blocked(*self.parts[path]) or self.gate.hangs.why(check.launchers, check.case.public)
        if blocked:
            return blocked
        crashes, hangs = self.failures.get((path, "crashed"), 0), self.failures.get((path, "timeout"), 0)
        if crashes >= MAX_CRASHES or hangs >= MAX_HANGS:
            return f"the code crashed on {crashes} and hung on {hangs} earlier cases of this path"
        return None

    def record(self, outcome: CaseOutcome, check: Check) -> None:
        self.measurement.routes.setdefault(check.path, []).append(outcome)
        if check.path == "abi" and not outcome.ok and outcome.ran:
            self.failed_abi.append(check)

    @property
    def public_passed(self) -> bool:
        public = [c for c in self.measurement.cases if c.public]
        return bool(public) and all(c.ok for c in public)


def _close_client(problem: KernelProblem) -> None:
    """Close the problem's checking child, noting what its sandbox refused the submission."""
    if problem.client is not None:
        ended = problem.client.close()
        problem.client = None
        if ended is not None and ended.refused:
            problem.measurement.telemetry[SANDBOX_REFUSED_KEY] = list(ended.refused)


@contextlib.contextmanager
def _ends_on_failure(problem: KernelProblem, during: str, timeout_s: float) -> Iterator[None]:
    """A crash, hang or raise of the submission's code during its timing ends the problem;
    the log says what it was doing (`during`), as the course's harness would have crashed
    on that very call. A hang in a launcher names it (rubrics.hw4.hangs): no later timing or
    Problem 3 waits for it again."""
    m = problem.measurement
    try:
        yield
    except OutOfBudget as exc:
        _skip_timing(problem, exc.detail)
    except ChildFailure as exc:
        m.status = exc.kind
        named = problem.gate.hangs.named_by(exc, timeout_s, during, public=True)
        m.log_tail = f"{named or exc.detail + ' ' + during}\n{exc.tail}"[-8000:]
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
    caller gives the problem a fresh one for the rest (`needs_fresh_child`). A check whose
    path cannot run (`why_not`) is recorded as not run, with the reason. Safe to run beside
    other problems' checks and profiles: nothing here is a speedup."""
    assert problem.client is not None
    hangs = problem.gate.hangs
    while problem.checks and problem.client is not None:
        check = problem.checks.pop(0)
        why = problem.why_not(check)
        if why:
            problem.record(not_run_outcome(check, why), check)
            continue
        with problem.clock(f"{check.path}_cases"):
            try:
                with hangs.calling(problem.client, check.launchers, check.case.public, f"in case {check.id}",
                                   config.call_timeout_s):
                    outcome = run_check(problem.client, check, config.call_timeout_s)
            except LauncherHung as exc:  # named by another call meanwhile
                outcome = not_run_outcome(check, exc.words)
                if exc.killed:
                    _close_client(problem)
            except OutOfBudget as exc:
                outcome = not_run_outcome(check, exc.detail)
                _close_client(problem)
            except ChildFailure as exc:
                named = hangs.named_by(exc, config.call_timeout_s, f"in case {check.id}", check.case.public)
                outcome = crash_outcome(check, exc, named)
                key = (check.path, exc.kind)
                problem.failures[key] = problem.failures.get(key, 0) + 1
                _close_client(problem)
        problem.record(outcome, check)


def needs_fresh_child(problem: KernelProblem) -> bool:
    """Whether the problem's child is gone with checks left to run; checks that cannot run
    (`why_not`) are recorded as not run first (no child is started for them)."""
    for check in list(problem.checks):
        why = problem.why_not(check)
        if why:
            problem.checks.remove(check)
            problem.record(not_run_outcome(check, why), check)
    return problem.client is None and bool(problem.checks)


def _skip_timing(problem: KernelProblem, why: str) -> None:
    """The problem keeps its checks' verdicts and is not timed, saying why (worker.scoring
    quotes `timing_skipped` where the speed points are lost)."""
    problem.measurement.telemetry["timing_skipped"] = why
    if problem.measurement.log_tail == "":
        problem.measurement.log_tail = f"not timed: {why}"


def ready_for_timing(problem: KernelProblem) -> bool:
    """No speed points without the course's own cases passing: a problem whose public cases
    failed spends no GPU time on timing (a failed hidden case costs only its share); nor once
    the run's budget is used up."""
    if not problem.public_passed:
        if problem.measurement.log_tail == "":
            problem.measurement.log_tail = "not timed: a public correctness case failed"
        return False
    blocked = problem.gate.deadline.spent() or problem.gate.hangs.why(binding_calls(problem.kind))
    if blocked:
        _skip_timing(problem, blocked)
        return False
    return True


def profile_phase(problem: KernelProblem, config: TimingConfig) -> None:
    """The kernels' own GPU time, in the problem's second child, beside its checks: CUPTI's
    start-up takes seconds, which the checks then hide."""
    profiler, m, gate = problem.profiler, problem.measurement, problem.gate
    assert profiler is not None
    blocked = gate.blocked(*problem.parts["abi"]) or gate.hangs.why((problem.kind,))
    if blocked:
        problem.profiler = None
        profiler.close()
        m.telemetry["kernel_profile"] = f"kernel GPU time not measured: {blocked}"
        return
    largest = max(TIMING_CASES[problem.problem_id], key=lambda c: math.prod(c.shape))
    try:
        with problem.clock("kernel_profile"), gate.hangs.calling(profiler, (problem.kind,), public=True):
            m.kernel_ms, m.telemetry["kernel_profile"] = measure_kernel_ms(profiler, largest, problem.profile_rng,
                                                                           config)
        bandwidth = Bandwidth.of(largest.id, largest.shape, traffic_bytes(largest), m.kernel_ms)
        if bandwidth is not None:
            m.telemetry[BANDWIDTH_KEY] = bandwidth.to_dict()
    except (ChildFailure, LauncherHung) as exc:  # the checks say what it did
        m.telemetry["kernel_profile"] = f"kernel GPU time not measured: {exc}"
    finally:
        problem.profiler = None
        profiler.close()


def warm_phase(problem: KernelProblem, config: TimingConfig) -> None:
    """The timing child's one-time costs (seconds: imports, CUDA context) paid beside the
    checks. If the submission's code fails there, the child is closed and the timing gets a
    fresh one, where the failure, if it repeats, ends the problem as it would have."""
    timer, gate, calls = problem.timer, problem.gate, binding_calls(problem.kind)
    assert timer is not None
    if gate.blocked(*problem.parts["abi"], *problem.parts["binding"]) or gate.hangs.why(calls):
        problem.timer = None  # it would not be timed: its cases cannot pass
        timer.close()
        return
    try:
        with problem.clock("timing_warm"), gate.hangs.calling(timer, calls, public=True):
            warm_student(timer, problem.problem_id, config.call_timeout_s)
    except (ChildFailure, StudentError, LauncherHung):
        problem.timer = None
        timer.close()


def timing_phase(problem: KernelProblem, sides: Sides, config: TimingConfig, watch: ConditionsWatch | None = None) -> None:
    """The speedups, with nothing else of this grade running (the caller freezes the others);
    each trial a window whose GPU conditions `watch` reads."""
    client, m, cases = problem.client, problem.measurement, TIMING_CASES[problem.problem_id]
    assert client is not None
    shapes = ", ".join(c.describe_shape() for c in cases)
    during = f"(while timing your fused op and your MiniTorch's composition on the course's shapes: {shapes})"
    with _ends_on_failure(problem, during, config.call_timeout_s):
        with problem.clock("timing"):
            timing = time_problem(client, sides, cases, problem.rng, config, problem.thresholds, watch)
        measured = {"student": timing.student, "reference_ops": timing.reference_ops, "trusted": timing.kit}
        m.figures.update({name: figure for name, figure in measured.items() if figure is not None})
        m.telemetry.update(timing_shapes=timing.shapes, timing_evidence=timing.evidence,
                           timing_dropped=timing.dropped, timing_stopped=timing.stopped,
                           timing_thresholds=list(problem.thresholds), timed=describe_timing(cases))
        m.telemetry[CONDITIONS_KEY] = timing.conditions
        if timing.wrong_trials:
            m.routes.setdefault("binding", []).append(CaseOutcome(
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


def _warm_sides(sides: Sides, gate: LoadGate, timeout: float) -> None:
    """The side children's one-time costs, once the submission's minitorch is known to load
    (the reference-ops side runs it); if it does not, no problem will be timed: both go."""
    blocked = gate.blocked(MINITORCH)
    if blocked:
        for name in list(sides.clients):
            sides.drop(name, f"not needed: {blocked}")
        return
    warm_sides(sides, timeout)


def grade_kernel_problems(
    problems: list[KernelSpec],
    open_student: ClientFactory,
    sides: Sides,
    gate: LoadGate,
    rng: np.random.Generator,
    config: TimingConfig,
    telemetry: Callable[[], dict[str, Any]] = dict,
    progress: StageProgress = StageProgress(),
    cpus: TimingCpus | None = None,
    failed_abi: dict[str, list[Check]] | None = None,
    conditions: GpuConditions | None = None,
    piece: Piece = Piece.whole,
    turns: GpuTurns = GpuTurns(None),
) -> list[ProblemMeasurement]:
    """Every kernel problem (id, cases, thresholds, the libraries it needs), each in a fresh
    child of its own.

    Phase 1 runs the correctness checks and kernel profiles of all problems at once, each
    profile in a second child of its problem (they only compete for time, which they do not
    measure), and pays the one-time costs of the timing children (a third child per problem,
    which runs no check, and the side children). Every child is spawned before `gate` starts
    its load probes (rubrics.hw4.loading), and waits for the verdict on what it loads before
    running anything: what needs a part that does not load, or comes after the run's budget
    is used up, is settled at once with the reason. A check that crashes or hangs the child
    fails with what the child said, and the problem's remaining checks continue in a fresh
    child (up to MAX_CRASHES / MAX_HANGS per path). Phase 2 times, each in its timing child, the
    problems whose public cases all passed, one after another, the other children frozen
    meanwhile, so no code of this submission runs beside a timing; with `cpus`, on the same
    two cores every grade. `failed_abi` receives each problem's failed C ABI checks (those
    that ran), for rubrics.hw4.sanitize. `conditions`: the GPU's, read around every timing
    window (worker.gpu_conditions); the GPU's copy peak is measured once before the timings.

    `piece` (worker.states.Piece): `checks` runs phase 1 without the timing children and marks
    the problems phase 2 would time `timing_pending` (worker.pieces); `timing` runs only phase 2,
    for problems whose checks passed in an earlier piece, each timing child warmed first;
    `turns` holds the GPU's lock shared for phase 1 and alone for phase 2."""
    states = _problem_states(problems, gate, rng, telemetry, piece)
    try:
        with turns.sharing():
            waiting = _to_time(states, open_student, sides, gate, config, progress, piece)
        with turns.alone() if piece is not Piece.checks else contextlib.nullcontext():
            _time_or_leave(waiting, sides, gate, config, telemetry, progress, cpus, piece,
                           conditions or GpuConditions(None, None))
    finally:
        for problem in states:
            _finish(problem)
            for child in (problem.profiler, problem.timer):  # opened, but phase 1 never ran
                if child is not None:
                    child.close()
            problem.profiler = problem.timer = None
            problem.measurement.telemetry.setdefault("after", telemetry())
    if failed_abi is not None:
        failed_abi.update({p.problem_id: list(p.failed_abi) for p in states if p.failed_abi})
    return [p.measurement for p in states]


def _problem_states(problems: list[KernelSpec], gate: LoadGate, rng: np.random.Generator,
                    telemetry: Callable[[], dict[str, Any]], piece: Piece) -> list[KernelProblem]:
    """Each problem's state, with its own streams of random numbers (no checks to run in a timing piece)."""
    seeds = rng.integers(2**63 - 1, size=(len(problems), 3))
    states = [KernelProblem(pid, cases[0].kind,
                            [] if piece is Piece.timing else plan_checks(cases, np.random.default_rng(int(seed[2]))),
                            gate, paths_parts(cases[0].kind, needs), thresholds,
                            np.random.default_rng(int(seed[0])), np.random.default_rng(int(seed[1])),
                            ProblemMeasurement(pid, telemetry={"before": telemetry()}), Stopwatch({}))
              for (pid, cases, thresholds, needs), seed in zip(problems, seeds)]
    for problem in states:
        problem.measurement.telemetry["seconds"] = problem.clock.seconds  # where its wall time went
    return states


def _to_time(states: list[KernelProblem], open_student: ClientFactory, sides: Sides, gate: LoadGate,
             config: TimingConfig, progress: StageProgress, piece: Piece) -> list[KernelProblem]:
    """Phase 1 of `piece`: the problems to time, their timing children (but in the checks piece) ready."""
    if piece is Piece.timing:
        return _warm_for_timing(states, open_student, sides, gate, config)
    _check_all(states, open_student, sides, gate, config, progress, timers=piece is Piece.whole)
    return _hand_over_to_timing(states, open_student, gate, progress, timers=piece is Piece.whole)


def _time_or_leave(waiting: list[KernelProblem], sides: Sides, gate: LoadGate, config: TimingConfig,
                   telemetry: Callable[[], dict[str, Any]], progress: StageProgress, cpus: TimingCpus | None,
                   piece: Piece, conditions: GpuConditions) -> None:
    """Phase 2, or in the checks piece the problems it would time marked pending (worker.pieces)."""
    if piece is Piece.checks:
        for problem in waiting:
            mark_timing_pending(problem.measurement)
    else:
        _time_each(waiting, sides, gate, config, telemetry, progress, cpus, conditions)


def _fresh_child(problem: KernelProblem, open_student: ClientFactory) -> None:
    # Only ever from the stage's thread, with no other thread spawning: fork + exec is not thread-safe.
    with problem.clock("start"):
        problem.client = open_student(problem.problem_id)


def _check_all(states: list[KernelProblem], open_student: ClientFactory, sides: Sides, gate: LoadGate,
               config: TimingConfig, progress: StageProgress, timers: bool) -> None:
    """Phase 1: every problem's children spawned, then its checks, profile and (with `timers`)
    timing child's warm-up at once, a crashed check child replaced until its checks are done."""
    for problem in states:
        _fresh_child(problem, open_student)
        with problem.clock("start"):
            problem.profiler = open_student(f"{problem.problem_id}-profile")
            problem.timer = open_student(f"{problem.problem_id}-timing") if timers else None
    gate.start()
    if states:
        progress.problem(states[0].problem_id)
    with ThreadPoolExecutor(max_workers=max(1, 3 * len(states) + 1)) as pool:
        # beside the checks: profiles and the warming of the timing children (never a timing)
        aside = [pool.submit(profile_phase, problem, config) for problem in states]
        if timers:
            aside += [pool.submit(warm_phase, problem, config) for problem in states]
            aside.append(pool.submit(_warm_sides, sides, gate, config.call_timeout_s))
        rounds = states
        while rounds:  # a crash ends its child: the problem's remaining checks get a fresh one
            for done in [pool.submit(check_phase, problem, config) for problem in rounds]:
                done.result()
            rounds = [p for p in states if needs_fresh_child(p)]
            for done in aside if rounds else ():
                done.result()  # no other thread running while this thread spawns
            if rounds:
                gate.settle()  # nor a load probe
            for problem in rounds:
                _fresh_child(problem, open_student)
        for done in aside:
            done.result()
    gate.settle()  # no load probe runs beside the spawns that follow


def _hand_over_to_timing(states: list[KernelProblem], open_student: ClientFactory, gate: LoadGate,
                         progress: StageProgress, timers: bool) -> list[KernelProblem]:
    """The verdicts known (said to `progress`), each problem to be timed gets its timing child
    (fresh: it ran no check, and a hidden case may break a CUDA context), frozen until its turn;
    the others' children close. Returns the problems to time. Without `timers` (the checks
    piece) every child closes and the problems to time are only named."""
    for problem in states:  # a part that did not load, named with what its child printed
        logs = [log for log in map(gate.log, dict.fromkeys(sum(problem.parts.values(), ()))) if log]
        if logs:
            problem.measurement.log_tail = "\n".join(logs)
    waiting = [p for p in states if ready_for_timing(p)]
    progress.checked([p.measurement for p in states], frozenset(p.problem_id for p in waiting))
    if not timers:
        for problem in states:
            _finish(problem)
        return waiting
    for problem in states:
        _finish(problem)
        timer, problem.timer = problem.timer, None
        if problem not in waiting:
            if timer is not None:
                timer.close()
        elif timer is not None:
            problem.client = timer
        else:
            _fresh_child(problem, open_student)
    for problem in waiting:
        problem.client.pause()  # type: ignore[union-attr]
    return waiting


def _warm_for_timing(states: list[KernelProblem], open_student: ClientFactory, sides: Sides, gate: LoadGate,
                     config: TimingConfig) -> list[KernelProblem]:
    """The timing piece's phase 1: each problem's timing child and the side children pay their
    one-time costs at once (the problems' checks passed in the checks piece), then wait frozen."""
    for problem in states:
        with problem.clock("start"):
            problem.timer = open_student(f"{problem.problem_id}-timing")
    gate.start()
    with ThreadPoolExecutor(max_workers=len(states) + 1) as pool:
        warming = [pool.submit(warm_phase, problem, config) for problem in states]
        warming.append(pool.submit(_warm_sides, sides, gate, config.call_timeout_s))
        for done in warming:
            done.result()
    gate.settle()  # no load probe runs beside the spawns that follow
    waiting = [p for p in states if not _timing_blocked(p)]
    for problem in waiting:
        timer, problem.timer = problem.timer, None
        if timer is not None:
            problem.client = timer
        else:  # its warm-up failed: a fresh child, where a failure that repeats ends the problem
            _fresh_child(problem, open_student)
        problem.client.pause()  # type: ignore[union-attr]
    return waiting


def _timing_blocked(problem: KernelProblem) -> bool:
    """Whether a part the timing needs did not load this time (said, and the problem not timed)."""
    blocked = problem.gate.blocked(*problem.parts["abi"], *problem.parts["binding"])
    if blocked:
        _skip_timing(problem, blocked)
        if problem.timer is not None:
            problem.timer.close()
            problem.timer = None
    return bool(blocked)


def _time_each(waiting: list[KernelProblem], sides: Sides, gate: LoadGate, config: TimingConfig,
               telemetry: Callable[[], dict[str, Any]], progress: StageProgress, cpus: TimingCpus | None,
               conditions: GpuConditions) -> None:
    """Phase 2: first the GPU's copy peak (our kit's child; the submission's are frozen), then
    each problem timed alone in its child, in turn, while the budget lasts."""
    peak = measure_copy_peak(sides, config.call_timeout_s) if waiting else None
    for problem in waiting:
        problem.measurement.telemetry[COPY_PEAK_KEY] = peak
        # an earlier timing may have used up the budget, or named a launcher this one calls
        spent = gate.deadline.spent() or gate.hangs.why(binding_calls(problem.kind))
        if spent:
            problem.client.resume()  # type: ignore[union-attr]
            _skip_timing(problem, spent)
            _finish(problem)
            continue
        progress.problem(problem.problem_id)
        problem.client.resume()  # type: ignore[union-attr]
        problem.measurement.telemetry["timing_cpus"] = dataclasses.asdict(cpus) if cpus else None
        with _placed_for_timing(problem.client, sides, cpus):  # type: ignore[arg-type]
            timing_phase(problem, sides, config, conditions.watch())
        _finish(problem)
        problem.measurement.telemetry["after"] = telemetry()
