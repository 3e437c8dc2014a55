"""Problem 3's verdicts: how the fused model's results are compared with the unfused model's.

Pure functions on the arrays and counts the parent got back from the child; rubrics.hw4.problem3
runs the steps and assembles the cases. Every gradient comparison compares the same role (the
child pairs the two models' parameters, see rubrics.hw4.problem3).

(a) `p3-logits-finite`: both models' logits of the first batch are finite (buffers are
    poisoned with NaN before each call, so an answer that writes nothing fails).
(b) `p3-fused-matches-unfused`: fused vs unfused logits of that batch agree within
    MATCH_RTOL x logit scale (scale = max(1, max |unfused logit|)). Both compute the same
    function; they differ only in float32 rounding order inside the fused ops and in the
    LayerNorm epsilon (the kernel's 1e-8 against LayerNorm1d's 1e-5: a relative change of
    ~5e-6 / var). Measured on the reference kit at the course configuration (numpy backend):
    max difference 1.0e-5 at logit scale 3.2, i.e. 3e-6 of the scale; a wrong fused op, a
    missing mask or a dropped gamma moves logits by 1e-2..1 of it. 1e-3 leaves more than two
    orders of magnitude on both sides (GPU kernels' fast-math rounding included).
    `p3-loss-match`: the cross-entropy losses against random targets, computed here in float64
    from those logits, agree within 2 x that tolerance (a row's log-sum-exp minus one logit
    moves by at most twice the largest logit difference). Both losses are reported.
    `p3-fused-grads-match`: every parameter's gradient after backward(the same upstream
    gradient) agrees per parameter within GRAD_RTOL x max(its largest gradient, GRAD_FLOOR x
    the model's largest); measured 1e-5 of that scale on the kit, so 1e-2 catches swapped or
    wrong fused backward outputs (O(1)) with a 1000x margin.
(c) `p3-causal-fused`: the fused model's logits at positions < T-1 do not move when the last
    token of each sequence changes (p3_logits on `probe_batch` sequences, before and after).
    A correctly masked softmax gives exactly zero weight to future keys, so these logits are
    bit-identical (measured: 0); CAUSAL_RTOL x scale only forgives a non-deterministic backend.
(d) `p3-fused-ops-called`: every fused op (attn_softmax_fw/bw, layernorm_fw/bw) ran in every
    fused step; `p3-unfused-composed`: none ran in an unfused step (the baseline must be the
    composition of basic ops, or the ratio is not the course's). Counts come from wrappers the
    child puts on the backend's ops class: a diagnosis of honest mistakes.
(e) `p3-timed-fused-step-verified`: every timed step writes all parameter gradients into the
    arena inside the timed call; after timing, one fused timed step chosen at random is
    replayed untimed by the unfused model on the same inputs and the gradients compared as in
    (b). Each model gets its own fresh inputs in a pair, so nothing can be cached across them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from worker.measurements import CaseOutcome

FUSED_OPS = ("attn_softmax_fw", "attn_softmax_bw", "layernorm_fw", "layernorm_bw")
MATCH_RTOL = 1e-3
CAUSAL_RTOL = 1e-4
GRAD_RTOL = 1e-2
GRAD_FLOOR = 1e-3  # x the largest gradient of the model: the scale of a near-zero gradient


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


def max_diff(a: np.ndarray, b: np.ndarray) -> tuple[float, tuple[int, ...]]:
    diff = np.abs(np.subtract(a, b, dtype=np.float32))
    if diff.size == 0:
        return 0.0, ()
    if np.isnan(diff).any():
        idx = np.unravel_index(int(np.argmax(np.isnan(diff))), diff.shape)
        return float("nan"), tuple(int(i) for i in idx)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape)
    return float(diff[idx]), tuple(int(i) for i in idx)


def first_nonfinite(a: np.ndarray) -> tuple[int, ...] | None:
    bad = ~np.isfinite(a)
    if not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape))


def grad_case(case_id: str, got: np.ndarray, ref: np.ndarray, names: list[str], shapes: list[list[int]],
              what: str) -> CaseOutcome:
    """Per parameter: max |got - ref| <= GRAD_RTOL x max(its largest reference gradient,
    GRAD_FLOOR x the model's largest). NaN marks a parameter without a gradient: it must be
    missing from both or neither."""
    finite_ref = np.isfinite(ref)
    overall = float(np.max(np.abs(ref), where=finite_ref, initial=0.0))
    worst: tuple[float, float, float, int, int] | None = None  # (err/tol, err, tol, param, index)
    problems: list[str] = []
    pos = 0
    for i, (name, shape) in enumerate(zip(names, shapes)):
        n = int(np.prod(shape, dtype=np.int64))
        g, r = got[pos:pos + n], ref[pos:pos + n]
        pos += n
        g_nan, r_nan = ~np.isfinite(g), ~np.isfinite(r)
        if g_nan.all() and r_nan.all():
            continue  # no gradient in either model (an unused parameter)
        if g_nan.any() or r_nan.any():
            side = what if g_nan.any() else "reference"
            problems.append(f"{name}: missing or non-finite gradient in the {side} step")
            if worst is None or worst[0] != np.inf:
                worst = (np.inf, float("nan"), 0.0, i, int(np.argmax(g_nan | r_nan)))
            continue
        scale = max(float(np.abs(r).max()) if n else 0.0, GRAD_FLOOR * overall, 1e-30)
        tol = GRAD_RTOL * scale
        diff = np.abs(g - r)
        j = int(np.argmax(diff)) if n else 0
        err = float(diff[j]) if n else 0.0
        if worst is None or err / tol > worst[0]:
            worst = (err / tol, err, tol, i, j)
        if err > tol:
            problems.append(f"{name}: {err:.3g} > {tol:.3g}")
    if worst is None:
        return CaseOutcome(case_id, (), False, message="no parameter has a gradient")
    ratio, err, tol, i, j = worst
    head = (f"worst parameter {names[i]} {list(shapes[i])}: max |{what} - reference| gradient {err:.3g} "
            f"(tolerance {tol:.3g} = {GRAD_RTOL:g} x its gradient scale)")
    msg = head if not problems else f"{len(problems)} parameter(s) off: " + "; ".join(problems[:3]) + f"; {head}"
    return CaseOutcome(case_id, (len(names),), not problems, max_err=err, where=(i, j), message=msg)


def count_cases(steps: list[dict[str, Any]], defined: list[str]) -> list[CaseOutcome]:
    """(d) from the counts of every step: fused ops in each fused step, none in unfused ones."""
    fused = [st["counts"] for st in steps if st["model"] == "fused"]
    unfused = [st["counts"] for st in steps if st["model"] == "unfused"]
    fused_min = {op: min((int(cnt.get(op, 0)) for cnt in fused), default=0) for op in FUSED_OPS}
    unfused_max = {op: max((int(cnt.get(op, 0)) for cnt in unfused), default=0) for op in FUSED_OPS}
    missing = [op for op, n in fused_min.items() if n <= 0]
    undefined = [op for op in FUSED_OPS if op not in defined]
    used = [op for op, n in unfused_max.items() if n > 0]
    return [
        CaseOutcome(
            "p3-fused-ops-called", (), not missing,
            message=("fused step calls per op (fewest over steps): "
                     + ", ".join(f"{op} {n}" for op, n in fused_min.items())
                     + ("" if not missing else f"; never called with use_fused_kernel=True: {', '.join(missing)}")
                     + ("" if not undefined else f"; not defined by the backend's ops class: {', '.join(undefined)}")),
        ),
        CaseOutcome(
            "p3-unfused-composed", (), not used,
            message=("unfused step calls per op (most over steps): "
                     + ", ".join(f"{op} {n}" for op, n in unfused_max.items())
                     + ("" if not used else f"; called with use_fused_kernel=False: {', '.join(used)}")),
        ),
    ]
