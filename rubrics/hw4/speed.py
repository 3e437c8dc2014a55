"""Speedups of hw4's kernel problems: the course's definition, measured better than the course.

The definition is the course's current kernel_tests (rubrics/hw4/CONTRACT.md): on each of the
shapes its test draws (rubrics.hw4.course_shapes), the fused op's call against the test's own
composition of basic ops, both through the student's MiniTorch, with the tensors made (and a
backward's forward run) before the clock and the results read after it; the problem's
speedup is the mean over those shapes of the per-shape speedups, as the harness prints one
per case. What is better than the course: interleaved trials in rotating order, fresh inputs
every trial, the fused op's results verified, medians with a bootstrap interval, more trials
while a threshold is inside the interval, and the parent's clock.

Variants timed side by side on every shape:
- `custom`: the fused op (the submission's child);
- `baseline`: the composition on the submission's own basic ops, the course's very figure;
- `reference_ops`: the same composition, the submission's own Python, on OUR basic ops in the
  starter's ABI (rubrics/hw4/starter_combine.cu, swapped in for its combine.so in a child of
  its own). This is the figure that scores: slowing one's own basic ops (a sleep or busy loop
  in combine.cu, extra copies there) cannot raise it, and an ordinary HW3 combine.cu, whose
  per-call cost our library mirrors, gives the same figure as its own;
- `kit`: our reference kit's composition (information only; the kit is no student's code).

Guards on what the swap cannot see (ARCHITECTURE.md, "Speed points and gaming"):
- a composition that waits without computing (a sleep in Python): per trial, the baseline's
  time counts at most its CPU time scaled by the fused op's own CPU share (worker.timing.IDLE_SLACK);
- work deferred out of the fused call into the read of its results: per trial, what the
  fused op's read costs beyond the composition's read of the same shape is added back.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rubrics.hw4.abi import prepared_forward, traffic_bytes
from rubrics.hw4.case_inputs import binding_factors, make_binding_inputs
from rubrics.hw4.cases import Case
from rubrics.hw4.course_shapes import timing_cases
from rubrics.hw4.references import binding_output_names, binding_reference, verify
from worker.gpu.client import ChildClient, ChildFailure, StudentError
from worker.gpu.copy_peak import copy_peak_in
from worker.gpu_conditions import NO_NVML, ConditionsWatch
from worker.measurements import FUSED_BYTES_KEY
from worker.timing import RatioSummary, deferred_excess, mean_over_shapes, ratio_summary, waiting_removed
from worker.trials import Progress, StoppingRule, calls_per_request, rotated, until_stopped, verified_indices

# The shapes timed per problem: the course's (tests replace them with smaller ones).
TIMING_CASES: dict[str, list[Case]] = {pid: timing_cases(pid) for pid in ("1.1", "1.2", "2.1", "2.2")}

# The stage's copy-peak measurement (worker.gpu.copy_peak): big enough to reach the GPU's
# bandwidth, small beside its memory; first a tiny warm copy beside the checks (the imports).
PEAK_BYTES = 512 << 20
PEAK_REPS = 10
PEAK_WARM_BYTES = 1 << 20

STUDENT_VARIANTS = ("custom", "baseline")
SIDE_VARIANTS = ("reference_ops", "kit")


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 2  # untimed runs of each variant on each shape; the last one sizes the requests
    min_trials: int = 6  # per shape
    max_trials: int = 16  # per shape
    round_trials: int = 3  # trials added per shape per round while the interval is too wide
    kit_trials: int = 4  # the kit's figure is information: timed on the first trials only
    max_relative_width: float = 0.10  # stop once the 95% interval is within +-5%
    call_timeout_s: float = 60.0
    request_ms: float = 10.0  # aim for timed requests at least this long ...
    max_reps: int = 32  # ... with at most this many computations in one request
    kernel_calls: int = 20  # C ABI calls profiled for the kernel's own GPU time
    # Custom results verified per timed request after each shape's first (which verifies all):
    # a submission wrong on a fraction f of its results is still caught with probability
    # 1 - (1 - f)^(2 x trials).
    verified_reps: int = 2

    def stopping(self, thresholds: tuple[float, ...]) -> StoppingRule:
        """The rule a problem's rounds of trials stop by (trials counted per shape)."""
        return StoppingRule(self.min_trials, self.max_trials, self.max_relative_width, thresholds)


@dataclass(frozen=True)
class BindingRun:
    """One request's computations: results per input set, and per computation the
    milliseconds of the computation and of the read of its results (the parent's clock),
    with the share of the computation's wall time the child spent on a CPU (None where the
    sandbox cannot tell)."""

    outputs: list[dict[str, np.ndarray]]
    compute_ms: float
    read_ms: float
    cpu_share: float | None


WHAT_IS_TIMED = {
    "softmax_fw": "inp.attn_softmax(mask) against minitorch.nn.softmax(inp + mask, dim=3)",
    "softmax_bw": "Attn_Softmax.backward(ctx, out_grad) against the test's composition y * (g - sum(g * y))",
    "layernorm_fw": "inp.layernorm(gamma, beta) against the test's mean / var composition",
    "layernorm_bw": "out.backward(out_grad) of the fused LayerNorm against the test's backward formula",
}


def describe_timing(cases: list[Case]) -> str:
    """What the feedback says was timed: the calls, what was outside the clock, the shapes."""
    shapes = ", ".join(str(list(binding_factors(c) if c.kind == "softmax_bw" else c.shape)) for c in cases)
    before = "tensors made and the forward run" if cases[0].kind.endswith("_bw") else "tensors made"
    return (f"{WHAT_IS_TIMED[cases[0].kind]}, as the course's test times them ({before} before the clock, "
            f"results read after it), on the course's {len(cases)} shapes: {shapes}; the speedup is the mean of "
            "the per-shape speedups")


def run_binding(client: ChildClient, case: Case, variant: str, sets: list[dict[str, np.ndarray]],
                timeout: float, course_tensors: bool = False) -> BindingRun:
    """Prepare (untimed: tensors made, a backward's forward run), compute (timed), read (timed)
    one binding computation per input set.
    `course_tensors`: build the tensors exactly as the course's tests do (minitorch.tensor from
    lists), for the correctness checks; the timing trials take the faster tensor_from_numpy
    where the package has it."""
    reps = len(sets)
    client.arena.reset()
    client.call({"op": "binding_prepare", "kind": case.kind, "variant": variant, "reps": reps,
                 "course_tensors": course_tensors, "arrays": client.arena.put_stacked(sets, tuple(sets[0]))},
                timeout)
    if prepared_forward(case.kind, variant):  # a backward's forward, as the course runs it before its clock
        client.call({"op": "binding_forward", "kind": case.kind, "variant": variant}, timeout)
    first = sets[0]
    out_shapes = {"out": first["inp"].shape, "inp_grad": first["inp"].shape,
                  "gamma_grad": first.get("gamma", np.empty(0)).shape,
                  "beta_grad": first.get("beta", np.empty(0)).shape}
    outputs = {}
    for name in binding_output_names(case):
        ref = client.arena.alloc((reps, *out_shapes[name]))
        client.arena.view(ref)[...] = np.nan  # poisoned: an unwritten output fails
        outputs[name] = ref.to_json()
    _, compute_s, cpu_s = client.measured_call({"op": "binding_run", "kind": case.kind, "variant": variant}, timeout)
    _, read_s = client.timed_call({"op": "binding_read", "kind": case.kind, "variant": variant, "outputs": outputs},
                                  timeout)
    results = client.arena.read_all(outputs)
    share = None if cpu_s is None or compute_s <= 0 else min(1.0, cpu_s / compute_s)
    return BindingRun([{name: results[name][i] for name in results} for i in range(reps)],
                      compute_s * 1000.0 / reps, read_s * 1000.0 / reps, share)


@dataclass
class Sides:
    """The children beside the submission's own: `reference_ops` (its code on our basic ops)
    and `kit` (our kit); a side that fails is dropped with the reason, never the grade."""

    clients: dict[str, ChildClient | None]
    dropped: dict[str, str] = field(default_factory=dict)
    # the kit's child also measures the GPU's peak copy bandwidth (worker.gpu.copy_peak: its
    # handlers are loaded there): only on a GPU
    copy_peak: bool = False

    def client(self, name: str) -> ChildClient | None:
        return self.clients.get(name)

    def drop(self, name: str, reason: str) -> None:
        client = self.clients.pop(name, None)
        self.dropped.setdefault(name, reason)
        if client is not None:
            client.close()  # never reused after a failure (the reference_ops one runs student code)

    def close(self) -> None:
        """Every side child still open closed (the end of the kernel problems)."""
        for client in self.clients.values():
            if client is not None:
                client.close()

    def run(self, name: str, case: Case, sets: list[dict[str, np.ndarray]], timeout: float) -> BindingRun | None:
        """The side's composition on `sets`, or None once it is dropped (its failure says why)."""
        client = self.client(name)
        if client is None:
            return None
        try:
            return run_binding(client, case, "baseline", sets, timeout)
        except (ChildFailure, StudentError) as exc:
            self.drop(name, f"the composition failed there: {exc}")
            return None


def warm_case(problem: str) -> Case:
    """The problem's smallest course shape: what a child's one-time costs are paid on."""
    return min(TIMING_CASES[problem], key=lambda c: math.prod(c.shape))


def warm_student(client: ChildClient, problem: str, timeout: float) -> None:
    """A timing child's one-time costs (its imports, CUDA context, libraries loaded) paid
    before its timing, beside other work: one untimed computation of each of its variants.
    Raises what the submission's code raised."""
    case = warm_case(problem)
    inputs = [make_binding_inputs(case, np.random.default_rng())]
    for variant in STUDENT_VARIANTS:
        run_binding(client, case, variant, inputs, timeout)


def warm_sides(sides: Sides, timeout: float) -> None:
    """The same for the side children, which serve every problem: a few basic ops of no
    problem in particular (a side that cannot run those could time none); and the kit's child's
    copy, once and small (its imports), where it measures the copy peak."""
    for name in SIDE_VARIANTS:
        client = sides.client(name)
        if client is None:
            continue
        try:
            client.call({"op": "binding_warm"}, timeout)
        except (ChildFailure, StudentError) as exc:
            sides.drop(name, f"its MiniTorch's basic tensor ops failed: {exc}")
    measure_copy_peak(sides, timeout, PEAK_WARM_BYTES, 1)


def measure_copy_peak(sides: Sides, timeout: float, size: int = PEAK_BYTES, reps: int = PEAK_REPS) -> dict[str, Any]:
    """The GPU's peak copy bandwidth (worker.gpu.copy_peak.CopyPeak.to_dict) measured in our
    kit's child, or {"error": why not}: a failure there is recorded, never the grade's."""
    client = sides.client("kit") if sides.copy_peak else None
    if client is None:
        why = "no GPU" if not sides.copy_peak else f"our kit's child is not running ({sides.dropped.get('kit')})"
        return {"error": f"not measured: {why}"}
    try:
        return copy_peak_in(client, size, reps, timeout).to_dict()
    except ChildFailure as exc:
        sides.drop("kit", f"its copy-bandwidth measurement failed: {exc}")
        return {"error": f"not measured: {exc}"}
    except (StudentError, RuntimeError) as exc:
        return {"error": f"not measured: {exc}"}


@dataclass
class ShapeTiming:
    """The trials of one shape: effective milliseconds per variant, trial by trial."""

    case: Case
    reps: dict[str, int] = field(default_factory=dict)
    ms: dict[str, list[float]] = field(default_factory=dict)
    # raw figures per variant for the record: compute, read, cpu share
    raw: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    trials: int = 0
    wrong: int = 0
    windows: list[dict[str, Any]] = field(default_factory=list)  # each kept trial's GPU conditions
    # wall seconds, for the record of where a grade's time goes: per variant (its requests,
    # prepare and read included) and the parent's own work (inputs, verification)
    wall_s: dict[str, float] = field(default_factory=dict)

    def add_wall(self, what: str, seconds: float) -> None:
        self.wall_s[what] = self.wall_s.get(what, 0.0) + seconds

    def ratio(self, baseline: str) -> RatioSummary | None:
        pairs = [(b, c) for b, c in zip(self.ms.get(baseline, []), self.ms.get("custom", []))]
        if not pairs:
            return None
        return ratio_summary([b for b, _ in pairs], [c for _, c in pairs])

    def record(self) -> dict[str, Any]:
        def med(xs: list[float]) -> float | None:
            return round(statistics.median(xs), 4) if xs else None

        return {
            "case": self.case.id, "shape": list(self.case.shape), "trials": self.trials, "reps": dict(self.reps),
            "ms": {v: med(x) for v, x in self.ms.items()},
            FUSED_BYTES_KEY: traffic_bytes(self.case), "windows": self.windows,
            "raw": {v: {k: med(x) for k, x in d.items()} for v, d in self.raw.items()},
            "speedups": {b: (r.speedup if (r := self.ratio(b)) else None) for b in ("baseline", *SIDE_VARIANTS)},
            "wall_s": {k: round(v, 2) for k, v in self.wall_s.items()},
        }


@dataclass
class TimingResult:
    student: RatioSummary | None  # vs the submission's own basic ops (the course's figure)
    reference_ops: RatioSummary | None  # vs our basic ops under its code (the scored figure)
    kit: RatioSummary | None
    wrong_trials: int
    shapes: list[dict[str, Any]]
    evidence: dict[str, Any]
    dropped: dict[str, str]
    stopped: str  # why the trials stopped (worker.trials.STOP_REASONS)
    conditions: dict[str, Any] = field(default_factory=dict)  # the GPU's, over every window (ConditionsWatch.summary)


class _Timer:
    """The trials of one problem over its shapes."""

    def __init__(self, student: ChildClient, sides: Sides, config: TimingConfig, rng: np.random.Generator,
                 watch: ConditionsWatch) -> None:
        self.student, self.sides, self.config, self.rng, self.watch = student, sides, config, rng, watch

    def variants(self, trial: int) -> list[tuple[str, ChildClient, str]]:
        found = [("custom", self.student, "custom"), ("baseline", self.student, "baseline")]
        for name in SIDE_VARIANTS:
            client = self.sides.client(name)
            if client is not None and (name != "kit" or trial < self.config.kit_trials):
                found.append((name, client, "baseline"))
        return found

    def attempt(self, name: str, client: ChildClient, variant: str, shape: ShapeTiming,
                sets: list[dict[str, np.ndarray]]) -> BindingRun | None:
        """The submission's own variants raise (its crash ends the problem); a side's failure
        drops that side with the reason."""
        started = time.monotonic()
        try:
            if name in STUDENT_VARIANTS:
                return run_binding(client, shape.case, variant, sets, self.config.call_timeout_s)
            return self.sides.run(name, shape.case, sets, self.config.call_timeout_s)
        finally:
            shape.add_wall(name, time.monotonic() - started)

    def warm_up(self, shape: ShapeTiming) -> None:
        warm: dict[str, float] = {}  # the last warm-up's time: the first pays one-time costs
        for _ in range(max(1, self.config.warmup)):
            inputs = [make_binding_inputs(shape.case, self.rng)]
            for name, client, variant in self.variants(0):
                run = self.attempt(name, client, variant, shape, inputs)
                if run is not None:
                    warm[name] = run.compute_ms + run.read_ms
        # Each timed request runs a variant `reps` times, enough for ~request_ms, so the
        # request's own round trip (~0.1 ms) stays a small part of what is measured.
        shape.reps = {name: calls_per_request(ms, self.config.request_ms, self.config.max_reps)
                      for name, ms in warm.items()}

    def trial(self, shape: ShapeTiming) -> None:
        """One window: every variant once on fresh inputs, taken again while the GPU's
        conditions call for it (worker.gpu_conditions), then kept."""
        runs, record = self.watch.window(lambda: self.take(shape))
        shape.windows.append(record)
        self.keep(shape, runs)

    def take(self, shape: ShapeTiming) -> dict[str, BindingRun]:
        """Every variant once, in this trial's order, the fused op's results verified (a wrong
        one counts whether or not the window is kept)."""
        case, config = shape.case, self.config
        variants = self.variants(shape.trials)
        started = time.monotonic()
        sets = [make_binding_inputs(case, self.rng) for _ in range(max(shape.reps.get(v[0], 1) for v in variants))]
        shape.add_wall("inputs", time.monotonic() - started)
        runs: dict[str, BindingRun] = {}
        for name, client, variant in rotated(variants, shape.trials):
            run = self.attempt(name, client, variant, shape, sets[:shape.reps.get(name, 1)])
            if run is None:
                continue
            runs[name] = run
            checked = name == "custom" or (name == "reference_ops" and shape.trials == 0)
            if checked:
                started = time.monotonic()
                wrong = sum(not verify(case, run.outputs[i], binding_reference(case, sets[i])).ok
                            for i in verified_indices(len(run.outputs), config.verified_reps, everything=shape.trials == 0))
                shape.add_wall("verify", time.monotonic() - started)
                if name == "custom":
                    shape.wrong += wrong
                elif wrong:
                    self.sides.drop(name, f"the composition gave wrong results on {case.describe_shape()}: the "
                                          "submission's MiniTorch calls combine.so other than the starter does")
                    runs.pop(name)
        return runs

    def keep(self, shape: ShapeTiming, runs: dict[str, BindingRun]) -> None:
        """A window's figures added to its shape's trials."""
        shape.trials += 1
        custom = runs["custom"]
        reads = [runs[v].read_ms for v in ("baseline", "reference_ops") if v in runs]
        excess = deferred_excess(custom.read_ms, min(reads)) if reads else 0.0
        for name, run in runs.items():
            raw = shape.raw.setdefault(name, {})
            raw.setdefault("compute_ms", []).append(run.compute_ms)
            raw.setdefault("read_ms", []).append(run.read_ms)
            if run.cpu_share is not None:
                raw.setdefault("cpu_share", []).append(run.cpu_share)
            if name == "custom":
                effective = run.compute_ms + excess
                raw.setdefault("deferred_ms", []).append(excess)
            elif name == "kit":
                effective = run.compute_ms
            else:
                effective = waiting_removed(run.compute_ms, run.cpu_share, custom.cpu_share)
            shape.ms.setdefault(name, []).append(effective)
        for name in [n for n in shape.ms if n in self.sides.dropped]:
            shape.ms.pop(name)  # a dropped side: its figure is gone (aggregate needs every shape)

    def aggregate(self, shapes: list[ShapeTiming], baseline: str) -> RatioSummary | None:
        ratios = [s.ratio(baseline) for s in shapes]
        if not ratios or any(r is None for r in ratios):
            return None
        return mean_over_shapes([r for r in ratios if r is not None])


def _evidence(shapes: list[ShapeTiming]) -> dict[str, Any]:
    """Medians over every trial of every shape, for the scorer's flags."""
    def pooled(variant: str, key: str) -> list[float]:
        return [x for s in shapes for x in s.raw.get(variant, {}).get(key, [])]

    out: dict[str, Any] = {}
    for variant in ("custom", "baseline", "reference_ops"):
        share = pooled(variant, "cpu_share")
        if share:
            out[f"{variant}_cpu_share"] = round(statistics.median(share), 3)
    deferred = pooled("custom", "deferred_ms")
    compute = pooled("custom", "compute_ms")
    if deferred and compute:
        out["deferred_share"] = round(sum(deferred) / max(sum(compute) + sum(deferred), 1e-9), 3)
    own, ref, kit = (pooled(v, "compute_ms") for v in ("baseline", "reference_ops", "kit"))
    if own and ref:
        out["own_ops_vs_reference_ops"] = round(statistics.median(own) / statistics.median(ref), 3)
    if ref and kit:
        out["reference_ops_vs_kit"] = round(statistics.median(ref) / statistics.median(kit), 3)
    return out


def time_problem(student: ChildClient, sides: Sides, cases: list[Case], rng: np.random.Generator,
                 config: TimingConfig, thresholds: tuple[float, ...],
                 watch: ConditionsWatch | None = None) -> TimingResult:
    """Interleaved trials on every shape, in rounds of config.round_trials, until the stopping
    rule (worker.trials) stops the scored figure, the mean over the shapes; each trial a window
    `watch` reads the GPU's conditions around (none read without one)."""
    timer = _Timer(student, sides, config, rng, watch or ConditionsWatch(lambda: None, note=NO_NVML))
    rule = config.stopping(thresholds)
    shapes = [ShapeTiming(case) for case in cases]
    for shape in shapes:
        timer.warm_up(shape)

    def round_of_trials() -> Progress:
        for _ in range(config.round_trials):
            for shape in shapes:
                timer.trial(shape)
        scored = timer.aggregate(shapes, "reference_ops") or timer.aggregate(shapes, "baseline")
        return Progress(min(s.trials for s in shapes), scored)

    stopped, _ = until_stopped(rule, round_of_trials)
    return TimingResult(
        student=timer.aggregate(shapes, "baseline"),
        reference_ops=timer.aggregate(shapes, "reference_ops"),
        kit=timer.aggregate(shapes, "kit"),
        wrong_trials=sum(s.wrong for s in shapes),
        shapes=[s.record() for s in shapes],
        evidence=_evidence(shapes),
        dropped=dict(sides.dropped),
        stopped=stopped,
        conditions=timer.watch.summary(),
    )
