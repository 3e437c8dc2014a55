"""Problem 3 (fused kernels adopted in the Transformer): checks and step-time ratio, trusted side.

The submission's own DecoderLM runs in the sandboxed child (worker.hw4.child_problem3), built
twice with identical parameters: use_fused_kernel False ("unfused") and True ("fused"). The
parent draws every input, keeps the clock (ChildClient.timed_call) and judges:

(a) `p3-logits-finite`: both models' logits of the first batch are finite.
(b) `p3-fused-matches-unfused`: fused vs unfused logits of that batch agree within
    MATCH_RTOL x logit scale (scale = max(1, max |unfused logit|)). Both compute the same
    function; they differ only in float32 rounding order inside the fused ops and in the
    LayerNorm epsilon (the kernel's 1e-8 against LayerNorm1d's 1e-5, a relative change of
    ~5e-6 / var at unit-scale activations). Measured on the reference kit (numpy backend, course
    config, seeded) the difference is ~1e-6 of the logit scale; a wrong fused op, a missing
    mask or a dropped gamma moves logits by 1e-2..1 of it. 1e-3 leaves two orders of
    magnitude on both sides. `p3-loss-match`: the two cross-entropy losses against random
    targets, computed here in float64, agree within 2 x that tolerance (a per-row
    log-sum-exp minus one logit moves by at most twice the max logit difference).
(c) `p3-causal-fused`: the fused model's logits at positions < T-1 do not move when the last
    token of each sequence changes (p3_logits on a small slice of the batch, before and after).
    A correctly masked softmax gives exactly zero weight to future keys, so these logits are
    bit-identical; CAUSAL_RTOL x scale only forgives a backend that is not deterministic.
(d) `p3-fused-ops-called`: every fused op (attn_softmax_fw/bw, layernorm_fw/bw) ran in every
    fused step; `p3-unfused-composed`: none ran in an unfused step (the baseline is the
    composition of basic ops, or the ratio is not the course's).

Timing. One course-config step (vocab 10000, n_embd 256, 8 heads, 40 positions, batch 128)
takes 14-18 s with the host-pointer MiniTorch, step times drift by about +-7%, and Problem 3
has at most ~3 minutes. So the first (checked) step of each model doubles as the warm-up,
and then single steps are interleaved as pairs, unfused/fused, alternating which goes first,
each pair on fresh random tokens and upstream gradient: the two steps of a pair share the
machine's state at that moment, so drift cancels in the pair, and the bootstrap over pairs
(worker.timing.ratio_summary) gives the interval. Pairs continue up to max_pairs, while the
next pair fits in the budget (estimated from the previous ones), and stop early once the
interval is within +-TARGET_HALF_WIDTH of the speedup; min_pairs are always taken (the
budget may then be exceeded, and the telemetry says so). speedup_student = median unfused
step / median fused step. A step is forward + backward (see child_problem3.p3_step for why
no optimizer update).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from worker.gpu.channel import ALIGN
from worker.gpu.client import ChildClient, ChildFailure, StudentError
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.timing import RatioSummary, ratio_summary

HANDLERS = "worker.hw4.child_problem3"
FUSED_OPS = ("attn_softmax_fw", "attn_softmax_bw", "layernorm_fw", "layernorm_bw")
MATCH_RTOL = 1e-3
CAUSAL_RTOL = 1e-4
TARGET_HALF_WIDTH = 0.05


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
    step_timeout_s: float = 120.0  # one forward+backward step
    setup_timeout_s: float = 300.0  # imports (torch, pycuda) and building two models
    probe_batch: int = 4           # sequences in the causality probe

    def child_config(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("n_vocab", "n_embd", "n_head", "n_positions", "batch", "seq_len",
                                               "seed", "backend")}

    @property
    def logits_shape(self) -> tuple[int, int, int]:
        return (self.batch, self.seq_len, self.n_vocab)


def arena_bytes(config: Problem3Config) -> int:
    """Arena the ChildClient needs: tokens, one upstream gradient and one logits buffer."""
    logits = int(np.prod(config.logits_shape)) * 4
    tokens = config.batch * config.seq_len * 4
    return 2 * logits + 4 * tokens + 8 * ALIGN


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean negative log-likelihood of `targets` in float64 (row chunks bound the memory)."""
    v = logits.shape[-1]
    flat = logits.reshape(-1, v)
    tgt = targets.reshape(-1)
    total = 0.0
    for start in range(0, flat.shape[0], 512):
        z = flat[start:start + 512].astype(np.float64)
        m = z.max(axis=1)
        lse = m + np.log(np.exp(z - m[:, None]).sum(axis=1))
        total += float((lse - z[np.arange(z.shape[0]), tgt[start:start + 512]]).sum())
    return total / flat.shape[0]


def _max_diff(a: np.ndarray, b: np.ndarray) -> tuple[float, tuple[int, ...]]:
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    if diff.size == 0:
        return 0.0, ()
    if np.isnan(diff).any():
        idx = np.unravel_index(int(np.argmax(np.isnan(diff))), diff.shape)
        return float("nan"), tuple(int(i) for i in idx)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
    return float(diff[idx]), tuple(int(i) for i in idx)


def _first_nonfinite(a: np.ndarray) -> tuple[int, ...] | None:
    bad = ~np.isfinite(a)
    if not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape))


class _Session:
    """One measurement: the client, the arena bookkeeping and the record of what happened."""

    def __init__(self, client: ChildClient, config: Problem3Config, rng: np.random.Generator) -> None:
        self.client, self.config, self.rng = client, config, rng
        self.arena = client.arena
        self.started = time.monotonic()
        self.info: dict[str, Any] = {"config": asdict(config)}

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def batch(self) -> tuple[np.ndarray, np.ndarray]:
        c = self.config
        tokens = self.rng.integers(0, c.n_vocab, (c.batch, c.seq_len), dtype=np.int64).astype(np.int32)
        # A cross-entropy gradient's scale (1 / tokens); its values do not matter for timing.
        grad = (self.rng.standard_normal(c.logits_shape, dtype=np.float32) / np.float32(c.batch * c.seq_len))
        return tokens, grad

    def step(self, model: str, tokens_ref: Any, grad_ref: Any, logits_ref: Any = None) -> tuple[dict[str, Any], float]:
        msg = {"op": "p3_step", "model": model, "tokens": tokens_ref.to_json(), "grad": grad_ref.to_json(),
               "want_logits": logits_ref is not None,
               "logits_out": None if logits_ref is None else logits_ref.to_json()}
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
    shape = c.logits_shape
    s.arena.reset()
    tokens, grad = s.batch()
    targets = s.rng.integers(0, c.n_vocab, (c.batch, c.seq_len))
    t_ref, g_ref = s.arena.put(tokens), s.arena.put(grad)
    l_ref = s.arena.alloc(shape)
    logits: dict[str, np.ndarray] = {}
    first: dict[str, dict[str, Any]] = {}
    for model in ("unfused", "fused"):
        s.arena.view(l_ref)[...] = np.nan  # poisoned: an answer that writes nothing fails (a)
        reply, seconds = s.step(model, t_ref, g_ref, l_ref)
        logits[model] = s.arena.view(l_ref).copy()
        first[model] = {"seconds": seconds, "counts": reply.get("counts", {}),
                        "params_with_grad": reply.get("params_with_grad")}
    s.info["first_steps"] = first
    cases: list[CaseOutcome] = []

    # (a) finite
    bad = {m: _first_nonfinite(logits[m]) for m in logits}
    where = next((w for w in bad.values() if w is not None), None)
    cases.append(CaseOutcome(
        "p3-logits-finite", shape, where is None, where=where,
        message="logits of both models are finite" if where is None else
        "non-finite logits from the " + " and ".join(m for m, w in bad.items() if w is not None) + " model",
    ))

    # (b) fused == unfused, and the losses
    scale = max(1.0, float(np.nanmax(np.abs(logits["unfused"]))) if np.isfinite(logits["unfused"]).any() else 1.0)
    tol = MATCH_RTOL * scale
    err, at = _max_diff(logits["fused"], logits["unfused"])
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
    s.info["losses"] = loss
    s.info["logit_scale"] = scale
    s.info["max_logit_diff"] = err
    del logits

    # (c) causality of the fused model
    pb = max(1, min(c.probe_batch, c.batch))
    probe = tokens[:pb].copy()
    changed = probe.copy()
    changed[:, -1] = (probe[:, -1] + s.rng.integers(1, c.n_vocab, pb)) % c.n_vocab
    before = s.logits("fused", probe)
    after = s.logits("fused", changed)
    if c.seq_len < 2:
        cases.append(CaseOutcome("p3-causal-fused", before.shape, True, message="sequence of 1: nothing to probe"))
    else:
        c_err, c_at = _max_diff(after[:, :-1], before[:, :-1])
        c_tol = CAUSAL_RTOL * scale
        last_moved, _ = _max_diff(after[:, -1], before[:, -1])
        c_ok = bool(np.isfinite(c_err) and c_err <= c_tol and np.isfinite(before).all())
        cases.append(CaseOutcome(
            "p3-causal-fused", tuple(before.shape), c_ok, max_err=c_err, where=c_at,
            message=f"changing the last token moved earlier positions' logits by {c_err:.3g} "
                    f"(tolerance {c_tol:.3g}); the last position's by {last_moved:.3g}",
        ))
        s.info["causality"] = {"earlier_max_diff": c_err, "last_max_diff": last_moved, "probe_batch": pb}
    return cases, first


def _count_cases(steps: list[dict[str, Any]]) -> list[CaseOutcome]:
    """(d) from the counts of every step: fused ops in each fused step, none in unfused ones."""
    fused = [st["counts"] for st in steps if st["model"] == "fused"]
    unfused = [st["counts"] for st in steps if st["model"] == "unfused"]
    fused_min = {op: min((int(cnt.get(op, 0)) for cnt in fused), default=0) for op in FUSED_OPS}
    unfused_max = {op: max((int(cnt.get(op, 0)) for cnt in unfused), default=0) for op in FUSED_OPS}
    missing = [op for op, n in fused_min.items() if n <= 0]
    used = [op for op, n in unfused_max.items() if n > 0]
    return [
        CaseOutcome(
            "p3-fused-ops-called", (), not missing,
            message=("fused step calls per op (fewest over steps): "
                     + ", ".join(f"{op} {n}" for op, n in fused_min.items())
                     + ("" if not missing else f"; never called with use_fused_kernel=True: {', '.join(missing)}")),
        ),
        CaseOutcome(
            "p3-unfused-composed", (), not used,
            message=("unfused step calls per op (most over steps): "
                     + ", ".join(f"{op} {n}" for op, n in unfused_max.items())
                     + ("" if not used else f"; called with use_fused_kernel=False: {', '.join(used)}")),
        ),
    ]


def _converged(summary: RatioSummary) -> bool:
    return (summary.low >= summary.speedup * (1 - TARGET_HALF_WIDTH)
            and summary.high <= summary.speedup * (1 + TARGET_HALF_WIDTH))


def _time_pairs(s: _Session, warmup_s: float) -> tuple[RatioSummary | None, list[dict[str, Any]]]:
    c = s.config
    unfused_ms: list[float] = []
    fused_ms: list[float] = []
    steps: list[dict[str, Any]] = []
    pair_s: list[float] = []
    summary: RatioSummary | None = None
    stop = "max_pairs"
    for i in range(c.max_pairs):
        estimate = float(np.median(pair_s)) if pair_s else warmup_s
        if len(pair_s) >= c.min_pairs and s.elapsed() + estimate > c.budget_s:
            stop = "budget"
            break
        s.arena.reset()
        tokens, grad = s.batch()
        t_ref, g_ref = s.arena.put(tokens), s.arena.put(grad)
        order = ("unfused", "fused") if i % 2 == 0 else ("fused", "unfused")
        started = time.monotonic()
        times: dict[str, float] = {}
        for model in order:
            reply, seconds = s.step(model, t_ref, g_ref)
            times[model] = seconds * 1e3
            steps.append({"pair": i, "model": model, "ms": times[model], "counts": reply.get("counts", {})})
        pair_s.append(time.monotonic() - started)
        unfused_ms.append(times["unfused"])
        fused_ms.append(times["fused"])
        summary = ratio_summary(unfused_ms, fused_ms)
        if len(pair_s) >= c.min_pairs and _converged(summary):
            stop = "converged"
            break
    s.info["timing"] = {
        "unfused_ms": unfused_ms, "fused_ms": fused_ms, "pairs": len(unfused_ms), "stop": stop,
        "over_budget": s.elapsed() > c.budget_s,
    }
    return summary, steps


def measure_problem3(
    client: ChildClient,
    config: Problem3Config = Problem3Config(),
    rng: np.random.Generator | None = None,
    telemetry: Callable[[], dict[str, Any]] | None = None,
    problem_id: str = "3",
) -> ProblemMeasurement:
    """Checks (a)-(d) and the unfused/fused step-time ratio of the submission's DecoderLM.

    `client` must have been started with handlers including worker.hw4.child_problem3 and an
    arena of at least `arena_bytes(config)`."""
    rng = np.random.default_rng() if rng is None else rng
    m = ProblemMeasurement(problem_id=problem_id)
    s = _Session(client, config, rng)
    if telemetry is not None:
        m.telemetry["gpu_before"] = telemetry()
    phase = "setup"
    try:
        setup = client.call({"op": "p3_setup", "config": config.child_config()}, config.setup_timeout_s)
        s.info["setup"] = {k: v for k, v in setup.items() if k != "ok"}
        s.info["setup_s"] = s.elapsed()
        phase = "first steps and causality probe"
        cases, first = _checks(s)
        warmup_s = sum(first[mdl]["seconds"] for mdl in first)
        first_steps = [{"model": mdl, "counts": first[mdl]["counts"]} for mdl in first]
        summary, steps = None, []
        if all(c.ok for c in cases + _count_cases(first_steps)):  # no speed points without correctness
            phase = "timed steps"
            summary, steps = _time_pairs(s, warmup_s)
        all_steps = first_steps + steps
        cases += _count_cases(all_steps)
        s.info["steps"] = steps
        m.binding_cases = cases
        m.speedup_student = summary
        m.first_failure = next((cs for cs in cases if not cs.ok), None)
    except ChildFailure as exc:
        m.status = exc.kind if exc.kind in ("timeout", "crashed") else "crashed"
        m.log_tail = f"Problem 3, {phase}: {exc.detail}\n{exc.tail}"
        m.first_failure = CaseOutcome(f"p3-{phase.split()[0]}", (), False, message=f"{exc.kind} during {phase}: {exc.detail}")
    except StudentError as exc:
        m.status = "error"
        m.log_tail = f"Problem 3, {phase}: {exc.error}\n{exc.trace}"
        m.first_failure = CaseOutcome(f"p3-{phase.split()[0]}", (), False, message=f"your code raised during {phase}: {exc.error}")
    s.info["elapsed_s"] = s.elapsed()
    m.telemetry["problem3"] = s.info
    if telemetry is not None:
        m.telemetry["gpu_after"] = telemetry()
    return m
