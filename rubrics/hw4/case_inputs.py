"""The inputs of hw4's kernel cases, drawn as the course's tests draw them (trusted side).

make_inputs gives the raw buffers of one C ABI call (rubrics.hw4.abi); make_binding_inputs the
tensors of one call of the student's MiniTorch binding. Inputs are uniform(-1, 1) (times the
case's `scale`, plus its `offset`) as the course's kt.rand draws them, except a LayerNorm
backward's gamma, kept away from zero (MIN_ABS_GAMMA); separate output buffers are poisoned with
NaN, so an answer that writes nothing fails. Cases: rubrics.hw4.cases.
"""
from __future__ import annotations

import numpy as np

from rubrics.hw4.cases import MASK_KINDS, MIN_ABS_GAMMA, PAD_VALUE, Case, CaseError


def make_mask(rng: np.random.Generator, batch: int, to_len: int, kind: str) -> np.ndarray:
    """Additive attention mask [batch, to_len], float32, as the course's tests build it: each
    batch keeps a random prefix of 1..to_len keys and pads the rest. none: zeros (the
    starter's launcher always reads a mask); pad: PAD_VALUE on the padded tail; neginf: -inf
    there (kernels.h documents padding as -inf); full: like pad, and batch 0 entirely
    PAD_VALUE (fully padded rows)."""
    if kind not in MASK_KINDS:
        raise CaseError(f"unknown mask kind {kind!r}")
    mask = np.zeros((batch, to_len), dtype=np.float32)
    if kind == "none":
        return mask
    fill = -np.inf if kind == "neginf" else PAD_VALUE
    for b in range(batch):
        keep = int(rng.integers(1, to_len + 1))
        mask[b, keep:] = fill
    if kind == "full":
        mask[0, :] = PAD_VALUE
    return mask


def softmax_rows(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, float32 (valid softmax outputs: rows sum to 1)."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return _f32(e / e.sum(axis=-1, keepdims=True))


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _uniform(rng: np.random.Generator, shape: tuple[int, ...] | int, scale: float = 1.0,
             offset: float = 0.0) -> np.ndarray:
    """uniform(-scale, scale) + offset, drawn directly in float32 (the course's kt.rand is
    uniform(-1, 1); the timing trials draw millions of fresh values per trial)."""
    x = rng.random(shape, dtype=np.float32)
    x *= np.float32(2 * scale)
    x -= np.float32(scale - offset)
    return x


def _away_from_zero(gamma: np.ndarray) -> np.ndarray:
    """uniform(-1, 1) draws mapped to magnitudes uniform in [MIN_ABS_GAMMA, 1], signs kept."""
    return _f32(np.copysign(MIN_ABS_GAMMA + (1 - MIN_ABS_GAMMA) * np.abs(gamma), gamma))


def _poisoned(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, np.nan, dtype=np.float32)


def make_inputs(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Fresh random arrays for one ABI call (float32, C-contiguous), named as in abi_shapes.
    Separate output buffers are filled with NaN; in-place buffers hold the input.

    softmax_fw: inp [b,h,f,t] (in place), mask [b,t] (zeros for mask "none")
    softmax_bw: out_grad [rows,n] (in place), soft_out [rows,n] (softmax of uniform rows)
    layernorm_fw: inp, gamma, beta; out: ln_res, vars, means
    layernorm_bw: out_grad, inp, gamma (|gamma| >= MIN_ABS_GAMMA), beta, vars, means (the
                  variance without eps and the mean, as the course's backward test computes
                  them); out: gamma_grad, betta_grad, inp_grad"""
    p = case.params
    scale = p["scale"]
    if case.kind == "softmax_fw":
        return {"inp": _uniform(rng, case.shape, scale),
                "mask": make_mask(rng, p["batch"], p["to_len"], p["mask"])}
    if case.kind == "softmax_bw":
        rows, n = case.shape
        soft_out = softmax_rows(_uniform(rng, (rows, n)))
        return {"out_grad": _uniform(rng, (rows, n), scale), "soft_out": soft_out}
    rows, hidden = case.shape
    inp = _uniform(rng, (rows, hidden), scale, p["offset"])
    gamma, beta = _uniform(rng, hidden), _uniform(rng, hidden)
    if case.kind == "layernorm_bw":
        gamma = _away_from_zero(gamma)
    if case.kind == "layernorm_fw":
        return {"inp": inp, "gamma": gamma, "beta": beta, "ln_res": _poisoned((rows, hidden)),
                "vars": _poisoned((rows,)), "means": _poisoned((rows,))}
    x64 = inp.astype(np.float64)
    return {"out_grad": _uniform(rng, (rows, hidden)), "inp": inp, "gamma": gamma, "beta": beta,
            "vars": _f32(x64.var(axis=-1)), "means": _f32(x64.mean(axis=-1)),
            "gamma_grad": _poisoned((hidden,)), "betta_grad": _poisoned((hidden,)),
            "inp_grad": _poisoned((rows, hidden))}


def binding_factors(case: Case) -> tuple[int, int, int, int]:
    """(batch, nhead, from_len, to_len) of the attention tensor behind a softmax case: the
    case's own for softmax_fw and for softmax_bw cases that name them; otherwise batch 1 and
    the largest nhead of 8, 4, 2, 1 that divides rows."""
    p = case.params
    if case.kind == "softmax_fw":
        return case.shape  # type: ignore[return-value]
    if case.kind != "softmax_bw":
        raise CaseError(f"{case.kind} has no attention shape")
    if p["batch"] is not None:
        return p["batch"], p["nhead"], p["from_len"], p["softmax_len"]
    rows = p["rows"]
    nhead = next(h for h in (8, 4, 2, 1) if rows % h == 0)
    return 1, nhead, rows // nhead, p["softmax_len"]


def make_binding_inputs(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs for the student's MiniTorch binding, float32, shaped as the course's tests
    shape them (the binding is called with exactly these tensors):

    softmax_fw: inp [b,h,f,t], mask [b,1,1,t]: Tensor.attn_softmax(mask); the binding has
                no mask_future (the starter's attn_softmax_fw passes False)
    softmax_bw: inp [b,h,f,t] (b,h,f from binding_factors), mask [b,1,1,t] zeros, out_grad
                [b,h,f,t]: Attn_Softmax.backward(ctx of attn_softmax(inp, mask), out_grad)
    layernorm_fw: inp [rows,hidden], gamma, beta: Tensor.layernorm(gamma, beta)
    layernorm_bw: inp, gamma, beta, out_grad [rows,hidden]: the gradients of
                layernorm(inp, gamma, beta).backward(out_grad) wrt inp, gamma, beta"""
    p = case.params
    if case.kind == "softmax_fw":
        arrays = make_inputs(case, rng)
        b, _, _, t = case.shape
        return {"inp": arrays["inp"], "mask": arrays["mask"].reshape(b, 1, 1, t)}
    if case.kind == "softmax_bw":
        b, h, f, t = binding_factors(case)
        return {"inp": _uniform(rng, (b, h, f, t)), "mask": np.zeros((b, 1, 1, t), dtype=np.float32),
                "out_grad": _uniform(rng, (b, h, f, t), p["scale"])}
    arrays = make_inputs(case, rng)
    keep = ("inp", "gamma", "beta") + (("out_grad",) if case.kind == "layernorm_bw" else ())
    return {k: arrays[k] for k in keep}
