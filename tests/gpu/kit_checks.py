"""Correctness checks of llmsys_hw4 kernels through their C ABI (ctypes), against float64
references. Dependency-light on purpose (numpy and the standard library only): the GPU suite,
the mutant suite and the grader can all import it.

    from kit_checks import load_softmax_lib, SOFTMAX_FW_CASES
    lib = load_softmax_lib("minitorch/cuda_kernels/softmax_kernel.so")
    result = SOFTMAX_FW_CASES[0].run(lib, np.random.default_rng(0))
    assert result.ok, result.describe()

Every check draws fresh random inputs, poisons separate output buffers with NaN before the
call, and compares allclose-style: |out - ref| <= atol + rtol * |ref|. NaN never passes.
Tolerances are the course's (see HW4_INTERFACE.md).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

# (atol, rtol) per check, as the course's kernel tests use them.
TOL_SOFTMAX_FW = (1e-3, 1e-3)
TOL_SOFTMAX_BW = (1e-2, 1e-3)
TOL_LAYERNORM_FW = (1e-2, 1e-3)
TOL_LAYERNORM_BW = (1e-3, 1e-2)

LN_EPS = 1e-8
PAD_VALUE = -1e8  # additive mask value for padded keys (finite, like the course's masks)

_F = ctypes.c_void_p  # float* (host)
_I = ctypes.c_int
_S = ctypes.c_void_p  # cudaStream_t


# --------------------------------------------------------------------------- loading


def load_softmax_lib(path: str | Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.launch_attn_softmax.argtypes = [_F, _F, _I, _I, _I, _I, ctypes.c_bool, _S]
    lib.launch_attn_softmax.restype = None
    lib.launch_attn_softmax_bw.argtypes = [_F, _F, _I, _I, _S]
    lib.launch_attn_softmax_bw.restype = None
    return lib


def load_layernorm_lib(path: str | Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.launch_layernorm.argtypes = [_F, _F, _F, _F, _F, _F, _I, _I, _S]
    lib.launch_layernorm.restype = None
    lib.launch_layernorm_bw.argtypes = [_F, _F, _F, _F, _F, _F, _F, _F, _F, _I, _I, _S, _S]
    lib.launch_layernorm_bw.restype = None
    return lib


def _ptr(a: np.ndarray | None) -> int | None:
    if a is None:
        return None
    assert a.dtype == np.float32 and a.flags.c_contiguous, "ABI takes C-contiguous float32"
    return a.ctypes.data


def _poisoned(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, np.nan, dtype=np.float32)


# --------------------------------------------------------------------------- comparing


@dataclass
class CheckResult:
    ok: bool
    max_err: float  # largest |out - ref| over all compared outputs (inf when NaN/inf seen)
    where: str  # first failing element, e.g. "inp_grad[3, 17]", or "" when ok
    shape: tuple[int, ...]  # the case's main shape
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        status = "ok" if self.ok else "MISMATCH"
        text = f"{status} shape={self.shape} max_err={self.max_err:.3g}"
        if self.where:
            text += f" at {self.where}"
        if self.message:
            text += f": {self.message}"
        return text


def compare(
    outputs: dict[str, tuple[np.ndarray, np.ndarray]], atol: float, rtol: float, shape: tuple[int, ...]
) -> CheckResult:
    """outputs: name -> (got, reference). Allclose per element; NaN or inf in `got` fails."""
    max_err = 0.0
    for name, (got, ref) in outputs.items():
        got64 = np.asarray(got, dtype=np.float64)
        ref64 = np.asarray(ref, dtype=np.float64)
        if got64.shape != ref64.shape:
            return CheckResult(False, float("inf"), name, shape, f"shape {got64.shape} != {ref64.shape}")
        diff = np.abs(got64 - ref64)
        finite = np.isfinite(got64)
        err = float(np.max(np.where(finite, diff, np.inf))) if diff.size else 0.0
        max_err = max(max_err, err)
        good = finite & (diff <= atol + rtol * np.abs(ref64))
        if not good.all():
            bad = np.argwhere(~good)
            idx = tuple(int(i) for i in bad[0])
            where = f"{name}[{', '.join(map(str, idx))}]"
            message = (
                f"{len(bad)} of {good.size} elements of {name} out of tolerance "
                f"(atol={atol:g}, rtol={rtol:g}); got {float(got64[idx]):.7g}, expected {float(ref64[idx]):.7g}"
            )
            return CheckResult(False, max(max_err, float(diff[idx]) if finite[idx] else np.inf), where, shape, message)
    return CheckResult(True, max_err, "", shape)


# --------------------------------------------------------------------------- references


def softmax_fw_reference(
    inp: np.ndarray, mask: np.ndarray | None, mask_future: bool
) -> np.ndarray:
    """inp [B, H, F, T] float32; mask [B, T] additive or None. The mask is added in float32
    (as any float32 implementation does), then softmax in float64. A row whose entries are all
    -inf gives zeros."""
    x = inp.copy()
    if mask is not None:
        x = x + mask[:, None, None, :]  # float32 add
    x = x.astype(np.float64)
    F, T = x.shape[2], x.shape[3]
    if mask_future:
        future = np.triu(np.ones((F, T), dtype=bool), k=1)
        x = np.where(future, -np.inf, x)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = np.sum(e, axis=-1, keepdims=True)
    return np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)


def softmax_bw_reference(grad: np.ndarray, y: np.ndarray) -> np.ndarray:
    g = grad.astype(np.float64)
    y = y.astype(np.float64)
    return y * (g - np.sum(g * y, axis=-1, keepdims=True))


def layernorm_fw_reference(inp, gamma, beta):
    x = inp.astype(np.float64)
    mean = x.mean(axis=-1)
    var = x.var(axis=-1)
    xhat = (x - mean[:, None]) / np.sqrt(var[:, None] + LN_EPS)
    return xhat * gamma.astype(np.float64) + beta.astype(np.float64), var, mean


def layernorm_bw_reference(dy, inp, gamma, var, mean):
    """var, mean: the values handed to the kernel (variance without eps)."""
    dy = dy.astype(np.float64)
    x = inp.astype(np.float64)
    g = gamma.astype(np.float64)
    rstd = 1.0 / np.sqrt(var.astype(np.float64)[:, None] + LN_EPS)
    xhat = (x - mean.astype(np.float64)[:, None]) * rstd
    dbeta = dy.sum(axis=0)
    dgamma = (dy * xhat).sum(axis=0)
    dxhat = dy * g
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dgamma, dbeta, dx


# --------------------------------------------------------------------------- input makers


def make_mask(rng: np.random.Generator, batch: int, to_len: int, kind: str) -> np.ndarray | None:
    """none: no mask; pad: each batch keeps a random prefix (>= 1 key), the rest PAD_VALUE;
    inf: like pad with -inf; full: batch 0 entirely PAD_VALUE (a fully masked row), others pad."""
    if kind == "none":
        return None
    mask = np.zeros((batch, to_len), dtype=np.float32)
    fill = -np.inf if kind == "inf" else PAD_VALUE
    for b in range(batch):
        keep = int(rng.integers(1, to_len + 1))
        mask[b, keep:] = fill
    if kind == "full":
        mask[0, :] = PAD_VALUE
    elif kind not in ("pad", "inf"):
        raise ValueError(f"unknown mask kind {kind!r}")
    return mask


# --------------------------------------------------------------------------- checks


def check_softmax_fw(
    lib, batch: int, nhead: int, from_len: int, to_len: int, mask_future: bool,
    rng: np.random.Generator, *, mask: str = "pad", scale: float = 1.0, stream: int | None = None,
) -> CheckResult:
    shape = (batch, nhead, from_len, to_len)
    inp = (rng.standard_normal(shape) * scale).astype(np.float32)
    attn_mask = make_mask(rng, batch, to_len, mask)
    ref = softmax_fw_reference(inp, attn_mask, mask_future)
    out = inp.copy()  # in place
    lib.launch_attn_softmax(_ptr(out), _ptr(attn_mask), batch, nhead, from_len, to_len, mask_future, stream)
    return compare({"inp": (out, ref)}, *TOL_SOFTMAX_FW, shape)


def random_softmax_rows(rng: np.random.Generator, rows: int, length: int, scale: float = 1.0) -> np.ndarray:
    x = rng.standard_normal((rows, length)) * scale
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def check_softmax_bw(
    lib, rows: int, softmax_len: int, rng: np.random.Generator, *, scale: float = 1.0,
    stream: int | None = None,
) -> CheckResult:
    shape = (rows, softmax_len)
    y = random_softmax_rows(rng, rows, softmax_len)
    grad = (rng.standard_normal(shape) * scale).astype(np.float32)
    ref = softmax_bw_reference(grad, y)
    out = grad.copy()  # in place
    lib.launch_attn_softmax_bw(_ptr(out), _ptr(y), rows, softmax_len, stream)
    return compare({"out_grad": (out, ref)}, *TOL_SOFTMAX_BW, shape)


def check_layernorm_fw(
    lib, rows: int, hidden_dim: int, rng: np.random.Generator, *, scale: float = 1.0,
    offset: float = 0.0, check_stats: bool = True, stream: int | None = None,
) -> CheckResult:
    """check_stats: also compare `means` and `vars` (the variance without eps), which the
    backward consumes."""
    shape = (rows, hidden_dim)
    inp = (rng.standard_normal(shape) * scale + offset).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, hidden_dim).astype(np.float32)
    beta = rng.standard_normal(hidden_dim).astype(np.float32)
    ref, var_ref, mean_ref = layernorm_fw_reference(inp, gamma, beta)
    out, var, mean = _poisoned(shape), _poisoned((rows,)), _poisoned((rows,))
    lib.launch_layernorm(_ptr(out), _ptr(var), _ptr(mean), _ptr(inp), _ptr(gamma), _ptr(beta),
                         rows, hidden_dim, stream)
    outputs = {"ln_res": (out, ref)}
    if check_stats:
        outputs["means"] = (mean, mean_ref)
        outputs["vars"] = (var, var_ref)
    return compare(outputs, *TOL_LAYERNORM_FW, shape)


def check_layernorm_bw(
    lib, rows: int, hidden_dim: int, rng: np.random.Generator, *, scale: float = 1.0,
    stream_1: int | None = None, stream_2: int | None = None,
) -> CheckResult:
    shape = (rows, hidden_dim)
    inp = (rng.standard_normal(shape) * scale).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, hidden_dim).astype(np.float32)
    beta = rng.standard_normal(hidden_dim).astype(np.float32)
    x64 = inp.astype(np.float64)
    mean = x64.mean(axis=-1).astype(np.float32)
    var = x64.var(axis=-1).astype(np.float32)  # without eps, as the forward stores it
    dgamma_ref, dbeta_ref, dx_ref = layernorm_bw_reference(dy, inp, gamma, var, mean)
    dgamma, dbeta, dx = _poisoned((hidden_dim,)), _poisoned((hidden_dim,)), _poisoned(shape)
    lib.launch_layernorm_bw(_ptr(dgamma), _ptr(dbeta), _ptr(dx), _ptr(dy), _ptr(inp), _ptr(gamma),
                            _ptr(beta), _ptr(var), _ptr(mean), rows, hidden_dim, stream_1, stream_2)
    return compare(
        {"gamma_grad": (dgamma, dgamma_ref), "betta_grad": (dbeta, dbeta_ref), "inp_grad": (dx, dx_ref)},
        *TOL_LAYERNORM_BW, shape,
    )


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One check with fixed arguments; `run(lib, rng)` draws fresh inputs each time."""

    id: str
    check: Callable[..., CheckResult]
    args: tuple
    kwargs: tuple = ()  # (name, value) pairs, hashable
    public: bool = False  # course-like shape (as opposed to a hidden edge case)

    def run(self, lib, rng: np.random.Generator, **extra) -> CheckResult:
        return self.check(lib, *self.args, rng, **dict(self.kwargs), **extra)


def _sfw(b, h, f, t, future, mask="pad", scale=1.0, public=False) -> Case:
    cid = f"sfw-b{b}h{h}f{f}t{t}-{'fut' if future else 'nofut'}-{mask}" + (f"-x{scale:g}" if scale != 1.0 else "")
    return Case(cid, check_softmax_fw, (b, h, f, t, future), (("mask", mask), ("scale", scale)), public)


def _sbw(rows, n, scale=1.0, public=False) -> Case:
    cid = f"sbw-r{rows}n{n}" + (f"-x{scale:g}" if scale != 1.0 else "")
    return Case(cid, check_softmax_bw, (rows, n), (("scale", scale),), public)


def _lfw(rows, hidden, scale=1.0, offset=0.0, public=False) -> Case:
    cid = f"lnfw-r{rows}h{hidden}" + (f"-x{scale:g}" if scale != 1.0 else "") + (f"-o{offset:g}" if offset else "")
    return Case(cid, check_layernorm_fw, (rows, hidden), (("scale", scale), ("offset", offset)), public)


def _lbw(rows, hidden, scale=1.0, public=False) -> Case:
    cid = f"lnbw-r{rows}h{hidden}" + (f"-x{scale:g}" if scale != 1.0 else "")
    return Case(cid, check_layernorm_bw, (rows, hidden), (("scale", scale),), public)


# Course-like: tokens = batch * seq <= 1024, seq <= 512, nhead 8, from_len == to_len.
SOFTMAX_FW_CASES: list[Case] = [
    _sfw(32, 8, 32, 32, False, public=True),
    _sfw(16, 8, 64, 64, True, public=True),
    _sfw(8, 8, 128, 128, False, public=True),
    _sfw(4, 8, 256, 256, True, public=True),
    _sfw(2, 8, 512, 512, False, public=True),
    _sfw(2, 8, 512, 512, True, public=True),
    _sfw(10, 8, 100, 100, False, "none", public=True),
    # hidden edges: every dispatch boundary, odd row counts, masks, magnitudes
    _sfw(3, 5, 7, 1, False),
    _sfw(3, 5, 7, 1, True, "none"),
    _sfw(3, 5, 31, 31, True),
    _sfw(3, 5, 33, 33, True),
    _sfw(2, 3, 17, 33, False, "none"),
    _sfw(2, 8, 64, 64, False, "none"),
    _sfw(3, 8, 65, 65, True),
    _sfw(2, 3, 5, 127, False),
    _sfw(2, 3, 129, 129, True),
    _sfw(1, 8, 256, 256, False, "none"),
    _sfw(1, 3, 257, 257, True),
    _sfw(1, 4, 511, 511, False),
    _sfw(1, 4, 513, 513, True),
    _sfw(1, 2, 1000, 1000, False),
    _sfw(1, 2, 1024, 1024, True),
    _sfw(1, 2, 1024, 1024, False, "none"),
    _sfw(2, 8, 64, 64, True, "inf"),
    _sfw(2, 8, 200, 200, False, "inf"),
    _sfw(3, 4, 40, 40, False, "full"),
    _sfw(3, 4, 300, 300, True, "full"),
    _sfw(4, 8, 60, 60, True, scale=1e3),
    _sfw(2, 8, 300, 300, False, scale=1e3),
    _sfw(1, 8, 1024, 1024, True, scale=1e3),
]

SOFTMAX_BW_CASES: list[Case] = [
    _sbw(32 * 8 * 32, 32, public=True),
    _sbw(16 * 8 * 64, 64, public=True),
    _sbw(8 * 8 * 128, 128, public=True),
    _sbw(4 * 8 * 256, 256, public=True),
    _sbw(2 * 8 * 512, 512, public=True),
    # hidden edges
    _sbw(1, 1),
    _sbw(7, 31),
    _sbw(1001, 33),
    _sbw(999, 65),
    _sbw(333, 200),
    _sbw(257, 383),
    _sbw(129, 385),
    _sbw(100, 700),
    _sbw(77, 769),
    _sbw(65, 1000),
    _sbw(33, 1024),
    _sbw(31, 1025),
    _sbw(17, 1500),
    _sbw(40, 2048),
    _sbw(500, 300, scale=1e3),
]

LAYERNORM_FW_CASES: list[Case] = [
    _lfw(1024, 32, public=True),
    _lfw(16 * 40, 32, public=True),
    _lfw(128, 32, public=True),
    _lfw(512, 256, public=True),
    # hidden edges
    _lfw(1, 4),
    _lfw(3, 8),
    _lfw(1000, 12),
    _lfw(33, 36),
    _lfw(257, 100),
    _lfw(4097, 128),
    _lfw(100, 252),
    _lfw(64, 512),
    _lfw(99, 768),
    _lfw(31, 1020),
    _lfw(1024, 1024),
    _lfw(65, 2048),
    _lfw(513, 4096),
    _lfw(7, 8192),
    _lfw(300, 512, scale=1e3),
    _lfw(200, 1024, scale=1e-3),
    _lfw(128, 768, offset=5.0),
]

LAYERNORM_BW_CASES: list[Case] = [
    _lbw(1024, 32, public=True),
    _lbw(128, 32, public=True),
    _lbw(512, 256, public=True),
    # hidden edges
    _lbw(1, 4),
    _lbw(3, 8),
    _lbw(1000, 12),
    _lbw(33, 36),
    _lbw(257, 100),
    _lbw(4097, 128),
    _lbw(100, 252),
    _lbw(99, 768),
    _lbw(31, 1020),
    _lbw(1024, 1024),
    _lbw(65, 2048),
    _lbw(513, 4096),
    _lbw(2000, 4096),
    _lbw(300, 512, scale=1e3),
]

ALL_CASES: dict[str, list[Case]] = {
    "softmax_fw": SOFTMAX_FW_CASES,
    "softmax_bw": SOFTMAX_BW_CASES,
    "layernorm_fw": LAYERNORM_FW_CASES,
    "layernorm_bw": LAYERNORM_BW_CASES,
}
