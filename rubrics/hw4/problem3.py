"""Problem 3 (fused kernels adopted in the Transformer): checks and step-time ratio, trusted side.

The submission's own DecoderLM runs in the sandboxed child (rubrics.hw4.child_problem3), built
twice as the course's driver builds it (DecoderLM(**config), p_dropout 0): use_fused_kernel
False ("unfused") and True ("fused"). The parent draws every input, keeps the clock
(ChildClient.timed_call) and judges. Any failed case makes the problem not correct.

Parameters. The fused branch is the student's design, so its parameters may be named and
ordered differently (`t_layer_1.ln1_gamma` for `t_layer_1.ln_1.weights`, listed first).
The child pairs them one to one by role (rubrics.hw4.parameter_roles: same name and shape,
else the same module, LayerNorm and weight/gamma vs bias/beta kind, else the only parameter
of that shape and kind in the same module; a weight never pairs with a bias), copies every
unfused value into its counterpart, and writes the fused model's gradients in the unfused
order, so every gradient comparison compares the same role; the fused model's parameters
that pair with none keep their values and are named in `p3-fused-grads-match`'s message.
`p3-constructs` fails when a model cannot be built as the driver does (a DecoderLM without
use_fused_kernel, or one whose construction raises) and `p3-parameters-pair` when an unfused
parameter cannot be paired; either is then the problem's only case, so it scores 0 with
that message.

The cases (a) to (e), from the first steps, the causality probe, the op counts and the timed
steps, each with its tolerance and why it holds: rubrics.hw4.problem3_compare.

Timing. One course-config step (vocab 10000, n_embd 256, 8 heads, 40 positions, batch 128)
takes seconds with a host-pointer MiniTorch (the kit's: 12 pairs in 88 s on an H200; a
student's may be several times slower), step times drift by about +-7%, and Problem 3 has at
most ~3 minutes. The protocol is every timed problem's (worker.trials), with a trial
of two single steps: the first (checked) step of each model doubles as the warm-up, and then
pairs unfused/fused are interleaved, alternating which goes first: the two steps of a pair
share the machine's state at that moment, so drift cancels within a pair, and the bootstrap
over pairs (worker.timing.ratio_summary) gives the interval. Pairs stop by the stopping rule:
at least min_pairs (the budget may then be exceeded; telemetry says so), at most max_pairs,
in between once the interval holds neither the speed floor nor the target and is at most
max_relative_width wide, or when the next pair and the verification step (estimated from the
previous pairs) would not fit in the budget. One timed fused step, chosen afterwards where the
child cannot foresee it, is verified. A model that already failed a check on its first steps is
not timed at all (as a kernel problem whose public case failed): its points are settled.
speedup_student = median unfused step / median fused step.
A step is forward + backward without an optimizer update (see child_problem3.p3_step); the
timed call also carries a fixed cost both models pay alike (copying the upstream gradient
into a tensor, writing the gradients back: ~1% of a course-config step).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from rubrics.hw4.parameter_roles import listing
from rubrics.hw4.problem3_compare import (
    CAUSAL_RTOL,
    MATCH_RTOL,
    count_cases,
    cross_entropy,
    first_nonfinite,
    grad_case,
    max_diff,
)
from worker.gpu.channel import ALIGN
from worker.gpu.client import ChildClient, ChildFailure, OutOfBudget, StudentError
from worker.gpu.gpu_lock import GpuTurns
from worker.gpu_conditions import NO_NVML, ConditionsWatch
from worker.measurements import CONDITIONS_KEY, CaseOutcome, ProblemMeasurement
from worker.pieces import RECHECKED, mark_timing_pending
from worker.timing import RatioSummary, ratio_summary
from worker.trials import Progress, StoppingRule, rotated, until_stopped, verified_indices

HANDLERS = "rubrics.hw4.child_problem3"


@dataclass(frozen=True)
class Problem3Config:
    n_vocab: int = 10000
    n_embd: int = 256
    n_head: int = 8
    n_positions: int = 40
    batch: int = 128
    seq_len: int = 40
    seed: int = 11868
    backend: str = "cuda"          # "numpy": the kit's CPU backend, for CPU tests only
    budget_s: float = 180.0        # whole problem: setup, checks and timing
    min_pairs: int = 3
    max_pairs: int = 12
    max_relative_width: float = 0.10  # stop once the 95% interval is within about +-5%
    step_timeout_s: float = 120.0  # one forward+backward step
    setup_timeout_s: float = 300.0  # imports (torch, pycuda) and building two models
    probe_batch: int = 4           # sequences in the causality probe
    timed: bool = True             # False: the checks piece (worker.pieces), the timed pairs left pending

    def child_config(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("n_vocab", "n_embd", "n_head", "n_positions", "batch", "seq_len",
                                               "seed", "backend")}

    def stopping(self, thresholds: tuple[float, ...]) -> StoppingRule:
        """The rule the timed pairs stop by (a trial is one pair)."""
        return StoppingRule(self.min_pairs, self.max_pairs, self.max_relative_width, thresholds, self.budget_s)

    @property
    def logits_shape(self) -> tuple[int, int, int]:
        return (self.batch, self.seq_len, self.n_vocab)


def reference_parameter_elements(config: Problem3Config) -> int:
    """Parameters of the course's DecoderLM (4 pre-LN layers, 4x MLP, untied bias-free head)."""
    v, d, p = config.n_vocab, config.n_embd, config.n_positions
    layer = 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 2 * 2 * d
    return v * d + p * d + 4 * layer + 2 * d + d * v


def arena_bytes(config: Problem3Config) -> int:
    """Arena the ChildClient needs: two logits-sized buffers (upstream gradients / logits),
    token ids, and every parameter's gradient (with room for a student's extra parameters)."""
    logits = int(np.prod(config.logits_shape)) * 4
    tokens = config.batch * config.seq_len * 4
    grads = 2 * reference_parameter_elements(config) * 4
    return 2 * logits + 4 * tokens + grads + 16 * ALIGN


class _Session:
    """One measurement: the client, the arena bookkeeping and the record of what happened."""

    def __init__(self, client: ChildClient, config: Problem3Config, rng: np.random.Generator,
                 queued: Callable[[], float]) -> None:
        self.client, self.config, self.rng = client, config, rng
        self.arena = client.arena
        self.started = time.monotonic()
        # the seconds queued for the GPU's lock (GpuTurns.waited) are not the problem's time
        self.queued, self.queued_before = queued, queued()
        self.info: dict[str, Any] = {"config": asdict(config)}
        self.names: list[str] = []
        self.shapes: list[list[int]] = []
        self.elements = 0
        self.fused_only: list[tuple[str, list[int]]] = []  # the fused model's parameters that pair with none
        self.phase = "setup"  # what was running, for a failure's message

    def elapsed(self) -> float:
        """Seconds of the problem's budget used: its queueing for the GPU's lock left out."""
        return time.monotonic() - self.started - (self.queued() - self.queued_before)

    def inputs(self, seed: Any) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and an upstream gradient, reproducible from `seed` (the parent's secret)."""
        c = self.config
        gen = np.random.default_rng(seed)
        tokens = gen.integers(0, c.n_vocab, (c.batch, c.seq_len), dtype=np.int64).astype(np.int32)
        # A cross-entropy gradient's scale (1 / tokens); its values do not matter for timing.
        grad = gen.standard_normal(c.logits_shape, dtype=np.float32) / np.float32(c.batch * c.seq_len)
        return tokens, grad

    def new_seed(self) -> int:
        return int(self.rng.integers(0, 2**62))

    def grads_buffer(self) -> Any:
        ref = self.arena.alloc((self.elements,))
        return ref

    def one_step_refs(self, seed: Any) -> tuple[Any, Any, Any]:
        """A fresh arena holding the inputs `seed` makes and a gradients buffer: (tokens,
        upstream gradient, gradients) for one step of either model."""
        self.arena.reset()
        tokens, grad = self.inputs(seed)
        return self.arena.put(tokens), self.arena.put(grad), self.grads_buffer()

    def step(self, model: str, tokens_ref: Any, grad_ref: Any, logits_ref: Any = None,
             grads_ref: Any = None, device_memory: bool = False) -> tuple[dict[str, Any], float]:
        if logits_ref is not None:
            self.arena.view(logits_ref)[...] = np.nan  # poisoned: an answer that writes nothing fails
        if grads_ref is not None:
            self.arena.view(grads_ref)[...] = np.nan
        msg = {"op": "p3_step", "model": model, "tokens": tokens_ref.to_json(), "grad": grad_ref.to_json(),
               "want_logits": logits_ref is not None,
               "logits_out": None if logits_ref is None else logits_ref.to_json(),
               "grads_out": None if grads_ref is None else grads_ref.to_json(), "device_memory": device_memory}
        return self.client.timed_call(msg, self.config.step_timeout_s)

    def logits(self, model: str, tokens: np.ndarray) -> np.ndarray:
        self.arena.reset()
        t_ref = self.arena.put(np.ascontiguousarray(tokens, dtype=np.int32))
        out = self.arena.alloc((*tokens.shape, self.config.n_vocab))
        self.arena.view(out)[...] = np.nan
        self.client.call({"op": "p3_logits", "model": model, "tokens": t_ref.to_json(), "out": out.to_json()},
                         self.config.step_timeout_s)
        return self.arena.view(out).copy()


def _checks(s: _Session) -> tuple[list[CaseOutcome], dict[str, Any]]:
    """The checked first steps (also the warm-ups) and the causality probe."""
    c = s.config
    s.arena.reset()
    tokens, grad = s.inputs(s.new_seed())
    targets = s.rng.integers(0, c.n_vocab, (c.batch, c.seq_len))
    t_ref, g_ref = s.arena.put(tokens), s.arena.put(grad)
    del grad
    l_ref = s.arena.alloc(c.logits_shape)
    p_ref = s.grads_buffer()
    logits: dict[str, np.ndarray] = {}
    grads: dict[str, np.ndarray] = {}
    first: dict[str, dict[str, Any]] = {}
    for model in ("unfused", "fused"):
        s.phase = f"first steps ({model} model's step)"  # a crash here names the model that crashed
        # untimed for the score: the device's memory is sampled here only
        reply, seconds = s.step(model, t_ref, g_ref, l_ref, p_ref, device_memory=True)
        logits[model] = s.arena.view(l_ref).copy()
        grads[model] = s.arena.view(p_ref).copy()
        first[model] = {"seconds": seconds, "counts": reply.get("counts", {}),
                        "params_with_grad": reply.get("params_with_grad"), "memory": reply.get("memory")}
    s.info["first_steps"] = first
    cases = _agreement_cases(s, logits, grads, targets)
    del logits, grads
    s.phase = "first steps (causality probe of the fused model)"
    cases.append(_causality_case(s, tokens))
    return cases, first


def _agreement_cases(s: _Session, logits: dict[str, np.ndarray], grads: dict[str, np.ndarray],
                     targets: np.ndarray) -> list[CaseOutcome]:
    """(a) finite logits, (b) the fused model computes what the unfused does: logits, loss and
    every parameter's gradient."""
    c = s.config
    shape = c.logits_shape
    bad = {m: first_nonfinite(logits[m]) for m in logits}
    where = next((w for w in bad.values() if w is not None), None)
    cases = [CaseOutcome(
        "p3-logits-finite", shape, where is None, where=where,
        message="logits of both models are finite" if where is None else
        "non-finite logits from the " + " and ".join(m for m, w in bad.items() if w is not None) + " model",
    )]
    ref = logits["unfused"]
    scale = max(1.0, float(np.max(np.abs(ref), where=np.isfinite(ref), initial=0.0)))
    tol = MATCH_RTOL * scale
    err, at = max_diff(logits["fused"], ref)
    ok = bool(np.isfinite(err) and err <= tol)
    cases.append(CaseOutcome(
        "p3-fused-matches-unfused", shape, ok, max_err=err, where=at,
        message=f"max |fused - unfused| logit {err:.3g} (tolerance {tol:.3g} = {MATCH_RTOL:g} x logit scale {scale:.3g})",
    ))
    loss = {m: cross_entropy(logits[m], targets) for m in logits}
    loss_diff = abs(loss["fused"] - loss["unfused"])
    loss_ok = bool(np.isfinite(loss_diff) and loss_diff <= 2 * tol)
    cases.append(CaseOutcome(
        "p3-loss-match", (c.batch, c.seq_len), loss_ok, max_err=loss_diff,
        message=f"first-step cross-entropy (float64): unfused {loss['unfused']:.6g}, fused {loss['fused']:.6g} "
                f"(tolerance {2 * tol:.3g})",
    ))
    grads_case = grad_case("p3-fused-grads-match", grads["fused"], grads["unfused"], s.names, s.shapes, "fused")
    if s.fused_only:
        grads_case = replace(grads_case, message=f"{grads_case.message}; not compared: {len(s.fused_only)} "
                             "parameter(s) of the fused model that pair with none of the unfused model's "
                             f"(unused by its step, or its own; they keep their values): {listing(s.fused_only)}")
    cases.append(grads_case)
    s.info["losses"] = loss
    s.info["logit_scale"] = scale
    s.info["max_logit_diff"] = err
    return cases


def _causality_case(s: _Session, tokens: np.ndarray) -> CaseOutcome:
    """(c) the fused model is causal: changing the last token moves no earlier position's logits."""
    c = s.config
    pb = max(1, min(c.probe_batch, c.batch))
    probe = tokens[:pb].copy()
    changed = probe.copy()
    changed[:, -1] = (probe[:, -1] + s.rng.integers(1, c.n_vocab, pb)) % c.n_vocab
    before = s.logits("fused", probe)
    after = s.logits("fused", changed)
    if c.seq_len < 2:
        return CaseOutcome("p3-causal-fused", before.shape, True, message="sequence of 1: nothing to probe")
    c_err, c_at = max_diff(after[:, :-1], before[:, :-1])
    c_tol = CAUSAL_RTOL * s.info["logit_scale"]
    last_moved, _ = max_diff(after[:, -1], before[:, -1])
    c_ok = bool(np.isfinite(c_err) and c_err <= c_tol and np.isfinite(before).all())
    measured = (f"changing the last token moved earlier positions' logits by {c_err:.3g} "
                f"(tolerance {c_tol:.3g}); the last position's by {last_moved:.3g}")
    if np.isfinite(c_err) and c_err > c_tol and len(c_at) > 1:
        measured = (f"the fused model's attention is not causal: position {c_at[1]} sees a later token "
                    f"(its logits moved when only token {c.seq_len - 1} changed); {measured}")
    s.info["causality"] = {"earlier_max_diff": c_err, "last_max_diff": last_moved, "probe_batch": pb}
    return CaseOutcome("p3-causal-fused", tuple(before.shape), c_ok, max_err=c_err, where=c_at, message=measured)


@dataclass
class _Pairs:
    """The timed pairs kept so far: each model's milliseconds, each step's record, each kept
    pair's wall seconds and GPU conditions, and (input seed, gradients) of each timed fused step."""

    unfused_ms: list[float] = field(default_factory=list)
    fused_ms: list[float] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    pair_s: list[float] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)
    kept: list[tuple[int, np.ndarray]] = field(default_factory=list)
    last_take_s: float = 0.0  # the last pair taken, kept or not: what a retake would cost

    def take(self, s: _Session) -> tuple[dict[str, float], list[dict[str, Any]], tuple[int, np.ndarray], float]:
        """One pair on fresh inputs (each model its own: nothing one computes can serve the
        other), in this pair's order: its milliseconds, step records, fused step and seconds."""
        i = len(self.pair_s)
        seeds = {"unfused": s.new_seed(), "fused": s.new_seed()}
        s.arena.reset()
        refs = {}
        for model, seed in seeds.items():
            tokens, grad = s.inputs(seed)
            refs[model] = (s.arena.put(tokens), s.arena.put(grad))
            del grad
        p_ref = s.grads_buffer()
        started = time.monotonic()
        times: dict[str, float] = {}
        steps: list[dict[str, Any]] = []
        fused: tuple[int, np.ndarray] | None = None
        for model in rotated(("unfused", "fused"), i):
            reply, seconds = s.step(model, *refs[model], grads_ref=p_ref)
            times[model] = seconds * 1e3
            if model == "fused":
                fused = (seeds["fused"], s.arena.view(p_ref).copy())
            steps.append({"pair": i, "model": model, "ms": times[model], "counts": reply.get("counts", {}),
                          "memory": reply.get("memory")})
        assert fused is not None
        self.last_take_s = time.monotonic() - started
        return times, steps, fused, self.last_take_s

    def keep(self, taken: tuple[dict[str, float], list[dict[str, Any]], tuple[int, np.ndarray], float],
             window: dict[str, Any]) -> None:
        times, steps, fused, seconds = taken
        self.unfused_ms.append(times["unfused"])
        self.fused_ms.append(times["fused"])
        self.steps += steps
        self.kept.append(fused)
        self.pair_s.append(seconds)
        self.windows.append(window)


def _time_pairs(s: _Session, rule: StoppingRule, watch: ConditionsWatch) -> tuple[_Pairs, RatioSummary | None]:
    """Interleaved pairs until `rule` stops them, each a window whose GPU conditions `watch`
    reads (taken again while they call for it and the budget has room)."""
    pairs = _Pairs()

    def pair() -> Progress:
        # a retake only while it and the pairs still to come fit the budget
        taken, window = watch.window(lambda: pairs.take(s),
                                     lambda: s.elapsed() + 2.5 * pairs.last_take_s <= s.config.budget_s)
        pairs.keep(taken, window)
        # Room for the next pair and for the verification step (about half a pair).
        return Progress(len(pairs.pair_s), ratio_summary(pairs.unfused_ms, pairs.fused_ms), s.elapsed(),
                        1.5 * float(np.median(pairs.pair_s)))

    stop, last = until_stopped(rule, pair)
    s.info["timing"] = {
        "unfused_ms": pairs.unfused_ms, "fused_ms": pairs.fused_ms, "pairs": len(pairs.pair_s), "stop": stop,
        "thresholds": list(rule.thresholds), "timing_ended_s": s.elapsed(), "windows": pairs.windows,
    }
    return pairs, last.summary


def _verify_timed_step(s: _Session, pairs: _Pairs) -> CaseOutcome:
    """One timed fused step, picked at random only now, verified against an untimed unfused
    step on the same inputs (so no step can skip or defer work)."""
    s.phase = "timed step verification"
    k = verified_indices(len(pairs.kept), 1)[0]
    seed, fused_grads = pairs.kept[k]
    pairs.kept.clear()
    t_ref, g_ref, p_ref = s.one_step_refs(seed)
    s.step("unfused", t_ref, g_ref, grads_ref=p_ref)
    case = grad_case("p3-timed-fused-step-verified", fused_grads, s.arena.view(p_ref).copy(), s.names, s.shapes,
                     f"timed fused step (pair {k})")
    s.info["timing"]["verified_pair"] = k
    s.info["timing"]["over_budget"] = s.elapsed() > s.config.budget_s
    return case


def peak_memory(steps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model, the largest of its steps' peaks (MiB): host_peak_mib (each step's own peak
    where the child could reset the mark) and device_used_peak_mib (sampled, untimed steps);
    and host_first_last_mib, its first and last step's host peaks: memory that grows from step
    to step (a graph or buffers kept across steps) shows as a last far above the first."""
    peaks: dict[str, dict[str, Any]] = {}
    hosts: dict[str, list[float]] = {}
    for step in steps:
        figures = step.get("memory") or {}
        name = str(step.get("model"))
        model = peaks.setdefault(name, {"host_peak_mib": None, "device_used_peak_mib": None})
        for key in ("host_peak_mib", "device_used_peak_mib"):
            value = figures.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                model[key] = max(float(value), model[key] or 0.0)
                if key == "host_peak_mib":
                    hosts.setdefault(name, []).append(float(value))
    for name, values in hosts.items():
        peaks[name]["host_first_last_mib"] = [values[0], values[-1]]
    return peaks


def _display_names(unfused: list[Any], fused: list[Any] | None) -> list[str]:
    """The unfused name, with the fused counterpart's where the student renamed it."""
    if fused is None or len(fused) != len(unfused):
        return [str(n) for n in unfused]
    return [str(u) if u == f else f"{u} (fused {f})" for u, f in zip(unfused, fused)]


def _measure_built(s: _Session, m: ProblemMeasurement, setup: dict[str, Any], thresholds: tuple[float, ...],
                   watch: ConditionsWatch, turns: GpuTurns) -> None:
    """Everything after a successful p3_setup: checks (a)-(c), timing, (d) and (e); the checks
    on the GPU's lock shared, the timed pairs holding it alone."""
    config = s.config
    s.names = _display_names(setup.get("parameter_names", []), setup.get("fused_parameter_names"))
    s.shapes = [[int(d) for d in sh] for sh in setup.get("parameter_shapes", [])]
    s.fused_only = [(str(name), [int(d) for d in shape]) for name, shape in setup.get("fused_only_parameters", [])]
    s.elements = int(sum(int(np.prod(sh, dtype=np.int64)) for sh in s.shapes))
    s.info["setup"] = {k: v for k, v in setup.items()
                       if k not in ("ok", "parameter_names", "fused_parameter_names", "parameter_shapes")}
    s.info["setup"]["renamed_parameters"] = sum(
        u != f for u, f in zip(setup.get("parameter_names", []), setup.get("fused_parameter_names") or []))
    s.info["setup_s"] = s.elapsed()
    if not s.names or len(s.names) != len(s.shapes):
        raise StudentError("the DecoderLM has no parameters", "")
    needed = 2 * int(np.prod(config.logits_shape)) * 4 + s.elements * 4 + 4 * config.batch * config.seq_len * 4
    if needed + 16 * ALIGN > s.arena.size:
        raise StudentError(f"the DecoderLM's {s.elements} parameters do not fit the grader's buffers "
                           f"({s.arena.size} bytes); the course's model has {reference_parameter_elements(config)}", "")
    with turns.sharing():  # beside other runs' checks in a timing piece (worker.gpu.gpu_lock)
        cases, first = _checks(s)
    s.info["checks_s"] = s.elapsed()
    all_steps = [{"model": mdl, "counts": first[mdl]["counts"], "memory": first[mdl]["memory"]} for mdl in first]
    defined = list(setup.get("fused_ops_found", []))
    counted = count_cases(all_steps, defined)
    failed = next((c for c in cases + counted if not c.ok), None)
    summary: RatioSummary | None = None
    steps: list[dict[str, Any]] = []
    verified: list[CaseOutcome] = []
    if failed is None and not config.timed:
        mark_timing_pending(m)
    elif failed is None:
        # Only the timed pairs hold the GPU alone. The checked steps just before them warmed
        # the child, as in a whole grade; the verification step is a check, run shared.
        with turns.alone():
            s.phase = "timed steps"
            pairs, summary = _time_pairs(s, config.stopping(thresholds), watch)
        m.telemetry[CONDITIONS_KEY] = watch.summary()
        with turns.sharing():
            verified.append(_verify_timed_step(s, pairs))
        steps = pairs.steps
        all_steps += steps
        counted = count_cases(all_steps, defined)  # the timed steps may not call what the first did
    else:  # settled: more steps cannot pass a failed check, and speed points need every check passed
        m.telemetry["timing_skipped"] = f"the check {failed.case_id} failed on the first steps"
    cases += counted + verified
    s.info["steps"] = steps
    s.info["memory"] = peak_memory(all_steps)
    m.routes["binding"] = cases
    if summary is not None:
        m.figures["student"] = summary
    m.first_failure = next((cs for cs in cases if not cs.ok), None)


def measure_problem3(
    client: ChildClient,
    config: Problem3Config = Problem3Config(),
    rng: np.random.Generator | None = None,
    telemetry: Callable[[], dict[str, Any]] | None = None,
    problem_id: str = "3",
    thresholds: tuple[float, ...] = (),
    watch: ConditionsWatch | None = None,
    turns: GpuTurns = GpuTurns(None),
) -> ProblemMeasurement:
    """Checks (a)-(e) and the unfused/fused step-time ratio of the submission's DecoderLM,
    timed until clear of `thresholds` (the speedups where its points change) by the config's
    stopping rule, each timed pair a window whose GPU conditions `watch` reads (none without).
    `turns`: the GPU's lock, shared while it sets up and checks, alone while it times (a
    timing piece's; a whole grade holds none).

    `client` must have been started with handlers including rubrics.hw4.child_problem3 and an
    arena of at least `arena_bytes(config)`."""
    rng = np.random.default_rng() if rng is None else rng
    m = ProblemMeasurement(problem_id=problem_id, telemetry={RECHECKED: True})  # its timing checks again
    s = _Session(client, config, rng, turns.waited)
    if telemetry is not None:
        m.telemetry["gpu_before"] = telemetry()
    try:
        with turns.sharing():
            setup = client.call({"op": "p3_setup", "config": config.child_config()}, config.setup_timeout_s)
        failure = setup.get("setup_failure")
        if failure is None:
            _measure_built(s, m, setup, thresholds, watch or ConditionsWatch(lambda: None, note=NO_NVML), turns)
        else:  # not buildable or not pairable as the driver builds it: the only case, failed (0 points)
            case = CaseOutcome(str(failure.get("case_id", "p3-constructs")), (), False,
                               message=str(failure.get("message", "")))
            m.routes["binding"], m.first_failure = [case], case
            s.info["setup_failure"] = case.to_dict()
    except OutOfBudget as exc:  # the run's budget, not the submission's failure: what was found is not scored
        m.status = "not_run"
        m.log_tail = f"Problem 3, {s.phase}: {exc.detail}"
    except ChildFailure as exc:
        m.status = exc.kind if exc.kind in ("timeout", "crashed") else "crashed"
        m.log_tail = f"Problem 3, {s.phase}: {exc.detail}\n{exc.tail}"
        m.first_failure = CaseOutcome(f"p3-{s.phase.split()[0]}", (), False,
                                      message=f"{exc.kind} during {s.phase}: {exc.detail}")
    except StudentError as exc:
        m.status = "error"
        m.log_tail = f"Problem 3, {s.phase}: {exc.error}\n{exc.trace}"
        m.first_failure = CaseOutcome(f"p3-{s.phase.split()[0]}", (), False,
                                      message=f"your code raised during {s.phase}: {exc.error}")
    s.info["elapsed_s"] = s.elapsed()
    m.telemetry["problem3"] = s.info
    if telemetry is not None:
        m.telemetry["gpu_after"] = telemetry()
    return m
