"""Correctness cases for llmsys_hw4's kernels (Problems 1.1, 1.2, 2.1, 2.2): the trusted side.

The steps are separate on purpose. In the grader the trusted parent draws the inputs, keeps a
copy, computes the float64 reference and verifies; only the sandboxed child loads the
student's library and calls it:

    parent:  case = load_cases()["2.1"][0]
             arrays = make_inputs(case, rng)            # outputs poisoned with NaN
             expected = reference(case, arrays)         # before the call (or on a copy)
    child:   lib = load_abi(case.kind, so_path)
             abi_call(lib, case, arrays)                # in place / into the output buffers
    parent:  result = verify(case, {n: arrays[n] for n in abi_output_names(case)}, expected)

The student's MiniTorch binding takes the same cases through make_binding_inputs /
binding_reference (tensors instead of raw buffers; see those functions).

Case lists are data: the `cases:` section of rubrics/<slug>.yaml. Every case lies inside the
official starter's domain (worker/hw4/CONTRACT.md says where each limit comes from): inputs
uniform(-1, 1) (times `scale`, plus `offset`) as the course's `kt.rand` draws them, a mask
array always passed (the starter's launcher copies it unconditionally; zeros stand for "no
mask"), to_len <= 1024, rows of a softmax backward a multiple of 4 (the given
ker_attn_softmax_bw has no row guard), hidden_dim % 4 == 0 and <= 4096, and no input where the
open eps convention of the LayerNorm backward (sqrt(var) or sqrt(var + eps)) decides a verdict.
Tolerances are the course's (HW4_INTERFACE.md): |got - ref| <= atol + rtol * |ref|
element-wise, and NaN or inf in an output never passes; the rubric's `cases:` comment gives
the float32 error analysis that shows they hold for every case there.

Dependencies: the standard library, numpy and PyYAML only (this runs on the bare GPU machine).
"""
from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from worker.checks import CheckResult, compare

RUBRIC_DIR = Path(__file__).resolve().parent.parent.parent / "rubrics"

KINDS = ("softmax_fw", "softmax_bw", "layernorm_fw", "layernorm_bw")
PROBLEM_KIND = {"1.1": "softmax_fw", "1.2": "softmax_bw", "2.1": "layernorm_fw", "2.2": "layernorm_bw"}

# kind -> (atol, rtol), as the course's kernel tests use them.
TOLERANCES: dict[str, tuple[float, float]] = {
    "softmax_fw": (1e-3, 1e-3),
    "softmax_bw": (1e-2, 1e-3),
    "layernorm_fw": (1e-2, 1e-3),
    "layernorm_bw": (1e-3, 1e-2),
}

LN_EPS = 1e-8
PAD_VALUE = -1e8  # additive mask value for padded keys (the course's masks: kt.attn_mask * -1e8)
MASK_KINDS = ("none", "pad", "neginf", "full")
# launch_attn_softmax dispatches on to_len up to 1024 and throws above; the backward's
# ITERATIONS go up to 2048 (the assignment's list). Both launchers' limits: CONTRACT.md.
MAX_SOFTMAX_LEN = {"softmax_fw": 1024, "softmax_bw": 2048}
SOFTMAX_BW_ROW_MULTIPLE = 4  # the given kernel runs 4 rows per block with no guard on the row
MAX_LN_HIDDEN = 4096  # float4 loads; the backward launcher throws above 4096
# The LayerNorm backward may use sqrt(var) or sqrt(var + eps) (the course's own test uses the
# first, LightSeq the second): they differ by eps / (2 var) relative. Inputs of scale s have
# var = s^2 / 3, so s >= 0.02 keeps that below 4e-5, 270x inside the backward's rtol 1e-2
# (and the forward's, where eps = 1e-8 is prescribed). At s = 0.02 an eps of 1e-5 instead
# still moves the forward's outputs by ~4%: that hidden case catches a wrong epsilon.
MIN_LN_SCALE = 0.02

# Parameters per kind: required ones, and optional ones with their defaults.
_REQUIRED = {
    "softmax_fw": ("batch", "nhead", "from_len", "to_len", "mask_future"),
    "softmax_bw": ("softmax_len",),  # plus rows, or batch * nhead * from_len
    "layernorm_fw": ("rows", "hidden"),
    "layernorm_bw": ("rows", "hidden"),
}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "softmax_fw": {"mask": "pad", "scale": 1.0},
    "softmax_bw": {"rows": None, "batch": None, "nhead": None, "from_len": None, "scale": 1.0},
    "layernorm_fw": {"scale": 1.0, "offset": 0.0},
    "layernorm_bw": {"scale": 1.0, "offset": 0.0},
}


class CaseError(ValueError):
    """A case definition (in the rubric or built in code) is malformed."""


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # one of KINDS
    problem: str  # "1.1" | "1.2" | "2.1" | "2.2"
    params: dict[str, Any] = field(hash=False)  # every parameter of the kind, defaults filled in
    public: bool = False  # course-like shape (as opposed to a hidden edge case)

    @property
    def shape(self) -> tuple[int, ...]:
        """The main tensor's shape."""
        p = self.params
        if self.kind == "softmax_fw":
            return (p["batch"], p["nhead"], p["from_len"], p["to_len"])
        if self.kind == "softmax_bw":
            return (p["rows"], p["softmax_len"])
        return (p["rows"], p["hidden"])

    def describe_inputs(self) -> str:
        """How the inputs are drawn, so a student can rebuild the case from its feedback."""
        p = self.params
        spread = f"uniform(-{p['scale']:g}, {p['scale']:g})"
        if p.get("offset", 0.0):
            spread += f" + {p['offset']:g}"
        if self.kind == "softmax_fw":
            masks = {"none": "zeros", "pad": f"{PAD_VALUE:g} on a random tail of each batch's keys",
                     "neginf": "-inf on a random tail of each batch's keys",
                     "full": f"{PAD_VALUE:g} on a random tail, batch 0 fully padded"}
            return (f"inp {list(self.shape)} {spread}, attn_mask [{p['batch']}, 1, 1, {p['to_len']}] "
                    f"{masks[p['mask']]}, mask_future={p['mask_future']}")
        if self.kind == "softmax_bw":
            return (f"out_grad {list(self.shape)} {spread}, softmax output of uniform(-1, 1) "
                    f"rows of length {p['softmax_len']}")
        text = f"inp {list(self.shape)} {spread}, gamma and beta [{p['hidden']}] uniform(-1, 1)"
        return text + (", out_grad uniform(-1, 1)" if self.kind == "layernorm_bw" else "")

    def describe_shape(self) -> str:
        p = self.params
        name = {"softmax_fw": "inp", "softmax_bw": "out_grad"}.get(self.kind, "inp")
        text = f"{name}[{', '.join(map(str, self.shape))}]"
        if self.kind == "softmax_fw":
            text += f" mask={p['mask']}" + (" mask_future" if p["mask_future"] else "")
        if p.get("scale", 1.0) != 1.0:
            text += f" scale={p['scale']:g}"
        if p.get("offset", 0.0):
            text += f" offset={p['offset']:g}"
        return text


def _case_id(kind: str, p: Mapping[str, Any]) -> str:
    scale = f"-x{p['scale']:g}" if p.get("scale", 1.0) != 1.0 else ""
    offset = f"-o{p['offset']:g}" if p.get("offset", 0.0) else ""
    if kind == "softmax_fw":
        fut = "fut" if p["mask_future"] else "nofut"
        return f"sfw-b{p['batch']}h{p['nhead']}f{p['from_len']}t{p['to_len']}-{fut}-{p['mask']}{scale}"
    if kind == "softmax_bw":
        return f"sbw-r{p['rows']}n{p['softmax_len']}{scale}"
    prefix = "lnfw" if kind == "layernorm_fw" else "lnbw"
    return f"{prefix}-r{p['rows']}h{p['hidden']}{scale}{offset}"


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CaseError(f"{name} must be a positive integer, not {value!r}")
    return value


def make_case(kind: str, *, public: bool = False, id: str | None = None, problem: str | None = None,
              **params: Any) -> Case:
    """A validated Case from its parameters (defaults filled in, id generated unless given)."""
    if kind not in KINDS:
        raise CaseError(f"unknown case kind {kind!r}")
    allowed = set(_REQUIRED[kind]) | set(_DEFAULTS[kind])
    unknown = set(params) - allowed
    if unknown:
        raise CaseError(f"{kind}: unknown parameter(s) {sorted(unknown)}")
    p = dict(_DEFAULTS[kind])
    p.update(params)
    missing = [k for k in _REQUIRED[kind] if k not in p]
    if missing:
        raise CaseError(f"{kind}: missing parameter(s) {missing}")
    p["scale"] = float(p["scale"])
    if p["scale"] <= 0:
        raise CaseError(f"scale must be positive, not {p['scale']!r}")
    if "offset" in p:
        p["offset"] = float(p["offset"])
    if kind == "softmax_fw":
        for k in ("batch", "nhead", "from_len", "to_len"):
            _positive_int(k, p[k])
        if not isinstance(p["mask_future"], bool):
            raise CaseError(f"mask_future must be a bool, not {p['mask_future']!r}")
        if p["mask"] not in MASK_KINDS:
            raise CaseError(f"mask must be one of {MASK_KINDS}, not {p['mask']!r}")
        if p["to_len"] > MAX_SOFTMAX_LEN[kind]:
            raise CaseError(f"to_len {p['to_len']} > {MAX_SOFTMAX_LEN[kind]}")
    elif kind == "softmax_bw":
        _positive_int("softmax_len", p["softmax_len"])
        if p["softmax_len"] > MAX_SOFTMAX_LEN[kind]:
            raise CaseError(f"softmax_len {p['softmax_len']} > {MAX_SOFTMAX_LEN[kind]}")
        dims = [p["batch"], p["nhead"], p["from_len"]]
        if any(d is not None for d in dims):
            if any(d is None for d in dims):
                raise CaseError("softmax_bw: give batch, nhead and from_len together")
            for k in ("batch", "nhead", "from_len"):
                _positive_int(k, p[k])
            product = p["batch"] * p["nhead"] * p["from_len"]
            if p["rows"] is None:
                p["rows"] = product
            elif p["rows"] != product:
                raise CaseError(f"softmax_bw: rows {p['rows']} != batch*nhead*from_len {product}")
        if p["rows"] is None:
            raise CaseError("softmax_bw: give rows or batch, nhead and from_len")
        _positive_int("rows", p["rows"])
        if p["rows"] % SOFTMAX_BW_ROW_MULTIPLE:
            raise CaseError(f"softmax_bw: rows {p['rows']} is not a multiple of {SOFTMAX_BW_ROW_MULTIPLE}")
    else:
        _positive_int("rows", p["rows"])
        _positive_int("hidden", p["hidden"])
        if p["hidden"] % 4:
            raise CaseError(f"hidden {p['hidden']} is not a multiple of 4 (float4 loads)")
        if p["hidden"] > MAX_LN_HIDDEN:
            raise CaseError(f"hidden {p['hidden']} > {MAX_LN_HIDDEN}")
        if p["scale"] < MIN_LN_SCALE:
            raise CaseError(f"scale {p['scale']:g} < {MIN_LN_SCALE:g}: the open eps convention would decide")
    if problem is None:
        problem = {v: k for k, v in PROBLEM_KIND.items()}[kind]
    elif PROBLEM_KIND.get(problem) != kind:
        raise CaseError(f"problem {problem!r} does not take {kind} cases")
    return Case(id or _case_id(kind, p), kind, problem, p, bool(public))


def load_cases(rubric_path_or_slug: str | Path = "hw4") -> dict[str, list[Case]]:
    """Cases by problem id, from the rubric's `cases:` section:

        cases:
          "1.1":
            kind: softmax_fw
            public: [{batch: 32, nhead: 8, from_len: 32, to_len: 32, mask_future: false}, ...]
            hidden: [...]

    Public cases come first in each list. Case ids are unique across the rubric."""
    path = Path(rubric_path_or_slug)
    if not (path.suffix in (".yaml", ".yml") or path.is_file()):
        path = RUBRIC_DIR / f"{rubric_path_or_slug}.yaml"
    if not path.is_file():
        raise CaseError(f"no rubric file {path}")
    data = yaml.safe_load(path.read_text()) or {}
    section = data.get("cases")
    if not isinstance(section, dict) or not section:
        raise CaseError(f"{path.name}: no `cases:` section")
    out: dict[str, list[Case]] = {}
    seen: set[str] = set()
    for problem, spec in section.items():
        problem = str(problem)
        if not isinstance(spec, dict) or "kind" not in spec:
            raise CaseError(f"{path.name}: cases for {problem} need a kind")
        kind = spec["kind"]
        unknown = set(spec) - {"kind", "public", "hidden"}
        if unknown:
            raise CaseError(f"{path.name}: cases for {problem}: unknown key(s) {sorted(unknown)}")
        cases: list[Case] = []
        for public in (True, False):
            for entry in spec.get("public" if public else "hidden") or []:
                if not isinstance(entry, dict):
                    raise CaseError(f"{path.name}: case {entry!r} of {problem} is not a mapping")
                try:
                    case = make_case(kind, public=public, problem=problem, **entry)
                except (CaseError, TypeError) as exc:
                    raise CaseError(f"{path.name}: case {entry!r} of {problem}: {exc}") from exc
                if case.id in seen:
                    raise CaseError(f"{path.name}: duplicate case id {case.id}")
                seen.add(case.id)
                cases.append(case)
        out[problem] = cases
    return out


# --------------------------------------------------------------------------- inputs


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


def _poisoned(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, np.nan, dtype=np.float32)


def abi_output_names(case: Case) -> tuple[str, ...]:
    """The arrays the launch function writes (in place ones hold the input before the call)."""
    return {
        "softmax_fw": ("inp",),
        "softmax_bw": ("out_grad",),
        "layernorm_fw": ("ln_res", "vars", "means"),
        "layernorm_bw": ("gamma_grad", "betta_grad", "inp_grad"),
    }[case.kind]


def abi_shapes(case: Case) -> dict[str, tuple[int, ...]]:
    """Every array abi_call takes, with its shape."""
    p = case.params
    if case.kind == "softmax_fw":
        return {"inp": case.shape, "mask": (p["batch"], p["to_len"])}
    if case.kind == "softmax_bw":
        return {"out_grad": case.shape, "soft_out": case.shape}
    rows, hidden = case.shape
    if case.kind == "layernorm_fw":
        return {"inp": (rows, hidden), "gamma": (hidden,), "beta": (hidden,),
                "ln_res": (rows, hidden), "vars": (rows,), "means": (rows,)}
    return {"out_grad": (rows, hidden), "inp": (rows, hidden), "gamma": (hidden,), "beta": (hidden,),
            "vars": (rows,), "means": (rows,),
            "gamma_grad": (hidden,), "betta_grad": (hidden,), "inp_grad": (rows, hidden)}


def make_inputs(case: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Fresh random arrays for one ABI call (float32, C-contiguous), named as in abi_shapes.
    Separate output buffers are filled with NaN; in-place buffers hold the input.

    softmax_fw: inp [b,h,f,t] (in place), mask [b,t] (zeros for mask "none")
    softmax_bw: out_grad [rows,n] (in place), soft_out [rows,n] (softmax of uniform rows)
    layernorm_fw: inp, gamma, beta; out: ln_res, vars, means
    layernorm_bw: out_grad, inp, gamma, beta, vars, means (the variance without eps and the
                  mean, as the course's backward test computes them); out: gamma_grad,
                  betta_grad, inp_grad"""
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


# --------------------------------------------------------------------------- references (float64)


def softmax_fw_ref(inp: np.ndarray, mask: np.ndarray | None, mask_future: bool) -> np.ndarray:
    """inp [B, H, F, T] float32; mask [B, T] or [B, 1, 1, T] additive, or None. The mask is added in float32 (as
    any float32 implementation does), then softmax in float64; mask_future hides keys j > i.
    A row whose entries are all -inf gives zeros."""
    x = np.array(inp, dtype=np.float32, copy=True)
    if mask is not None:
        m = np.asarray(mask, dtype=np.float32)
        x = x + m.reshape(m.shape[0], 1, 1, m.shape[-1])
    x = x.astype(np.float64)
    if mask_future:
        future = np.triu(np.ones(x.shape[-2:], dtype=bool), k=1)
        x = np.where(future, -np.inf, x)
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = np.sum(e, axis=-1, keepdims=True)
    return np.where(s > 0, e / np.where(s > 0, s, 1.0), 0.0)


def softmax_bw_ref(grad: np.ndarray, y: np.ndarray) -> np.ndarray:
    g = np.asarray(grad, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    dx: np.ndarray = y * (g - np.sum(g * y, axis=-1, keepdims=True))
    return dx


def layernorm_fw_ref(inp: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, var without eps, mean) in float64."""
    x = np.asarray(inp, dtype=np.float64)
    mean = x.mean(axis=-1)
    var = x.var(axis=-1)
    xhat = (x - mean[:, None]) / np.sqrt(var[:, None] + LN_EPS)
    return xhat * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64), var, mean


def layernorm_bw_ref(dy: np.ndarray, inp: np.ndarray, gamma: np.ndarray, var: np.ndarray,
                     mean: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dgamma, dbeta, dinp) in float64; var, mean: the values handed to the kernel."""
    dy = np.asarray(dy, dtype=np.float64)
    x = np.asarray(inp, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    rstd = 1.0 / np.sqrt(np.asarray(var, np.float64)[:, None] + LN_EPS)
    xhat = (x - np.asarray(mean, np.float64)[:, None]) * rstd
    dbeta = dy.sum(axis=0)
    dgamma = (dy * xhat).sum(axis=0)
    dxhat = dy * g
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    return dgamma, dbeta, dx


def reference(case: Case, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 expected outputs keyed like abi_output_names. `inputs` must be make_inputs'
    arrays as they were before the call (compute this first, or on a copy); nothing is
    modified."""
    p = case.params
    if case.kind == "softmax_fw":
        return {"inp": softmax_fw_ref(inputs["inp"], inputs.get("mask"), p["mask_future"])}
    if case.kind == "softmax_bw":
        return {"out_grad": softmax_bw_ref(inputs["out_grad"], inputs["soft_out"])}
    if case.kind == "layernorm_fw":
        out, var, mean = layernorm_fw_ref(inputs["inp"], inputs["gamma"], inputs["beta"])
        return {"ln_res": out, "vars": var, "means": mean}
    dgamma, dbeta, dx = layernorm_bw_ref(inputs["out_grad"], inputs["inp"], inputs["gamma"],
                                         inputs["vars"], inputs["means"])
    return {"gamma_grad": dgamma, "betta_grad": dbeta, "inp_grad": dx}


def binding_output_names(case: Case) -> tuple[str, ...]:
    return {
        "softmax_fw": ("out",),
        "softmax_bw": ("inp_grad",),
        "layernorm_fw": ("out",),
        "layernorm_bw": ("inp_grad", "gamma_grad", "beta_grad"),
    }[case.kind]


def binding_reference(case: Case, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """float64 expected results of the binding path (make_binding_inputs), keyed like
    binding_output_names: the fused op's output (fw) or the gradients (bw). The layernorm
    statistics are exact (float64) here: the binding computes its own."""
    if case.kind == "softmax_fw":
        return {"out": softmax_fw_ref(inputs["inp"], inputs["mask"], False)}
    if case.kind == "softmax_bw":
        y = softmax_fw_ref(inputs["inp"], inputs["mask"], False)
        return {"inp_grad": softmax_bw_ref(inputs["out_grad"], y)}
    if case.kind == "layernorm_fw":
        return {"out": layernorm_fw_ref(inputs["inp"], inputs["gamma"], inputs["beta"])[0]}
    x64 = np.asarray(inputs["inp"], dtype=np.float64)
    dgamma, dbeta, dx = layernorm_bw_ref(inputs["out_grad"], x64, inputs["gamma"],
                                         x64.var(axis=-1), x64.mean(axis=-1))
    return {"inp_grad": dx, "gamma_grad": dgamma, "beta_grad": dbeta}


# --------------------------------------------------------------------------- the C ABI

_P = ctypes.c_void_p  # float* (host) and cudaStream_t
_I = ctypes.c_int
_SIGNATURES = {
    "launch_attn_softmax": [_P, _P, _I, _I, _I, _I, ctypes.c_bool, _P],
    "launch_attn_softmax_bw": [_P, _P, _I, _I, _P],
    "launch_layernorm": [_P, _P, _P, _P, _P, _P, _I, _I, _P],
    "launch_layernorm_bw": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _P, _P],
}
_FUNCTIONS = {
    "softmax_fw": ("launch_attn_softmax",),
    "softmax_bw": ("launch_attn_softmax_bw",),
    "layernorm_fw": ("launch_layernorm",),
    "layernorm_bw": ("launch_layernorm_bw",),
    # whole libraries (every function they export for this homework)
    "softmax": ("launch_attn_softmax", "launch_attn_softmax_bw"),
    "layernorm": ("launch_layernorm", "launch_layernorm_bw"),
}


def load_abi(kind: str, so_path: str | Path) -> ctypes.CDLL:
    """The library with argtypes/restype set for the launch function(s) of `kind` (a case
    kind, or "softmax"/"layernorm" for both functions of that library). A missing symbol
    raises AttributeError."""
    if kind not in _FUNCTIONS:
        raise CaseError(f"unknown ABI kind {kind!r}")
    lib = ctypes.CDLL(str(so_path))
    for name in _FUNCTIONS[kind]:
        fn = getattr(lib, name)
        fn.argtypes = _SIGNATURES[name]
        fn.restype = None
    return lib


def _ptr(a: np.ndarray | None) -> int | None:
    if a is None:
        return None
    if a.dtype != np.float32 or not a.flags.c_contiguous:
        raise CaseError("the ABI takes C-contiguous float32 arrays")
    return a.ctypes.data


def abi_call(lib: Any, case: Case, arrays: Mapping[str, np.ndarray], streams: tuple[Any, ...] = ()) -> None:
    """Call the case's launch function on `arrays` (make_inputs' names and shapes, checked
    first: a wrong buffer would let the kernel write out of bounds). Writes in place / into
    the output buffers. streams: cudaStream_t handles (default: None, the default stream)."""
    shapes = abi_shapes(case)
    for name, shape in shapes.items():
        given = arrays.get(name)
        if given is None or tuple(given.shape) != shape:
            raise CaseError(f"{case.id}: array {name} must have shape {shape}, "
                            f"got {None if given is None else given.shape}")
        _ptr(given)
    s1, s2 = (tuple(streams) + (None, None))[:2]
    p = case.params
    a = arrays
    if case.kind == "softmax_fw":
        lib.launch_attn_softmax(_ptr(a["inp"]), _ptr(a["mask"]),
                                p["batch"], p["nhead"], p["from_len"], p["to_len"],
                                bool(p["mask_future"]), s1)
    elif case.kind == "softmax_bw":
        lib.launch_attn_softmax_bw(_ptr(a["out_grad"]), _ptr(a["soft_out"]), p["rows"],
                                   p["softmax_len"], s1)
    elif case.kind == "layernorm_fw":
        lib.launch_layernorm(_ptr(a["ln_res"]), _ptr(a["vars"]), _ptr(a["means"]), _ptr(a["inp"]),
                             _ptr(a["gamma"]), _ptr(a["beta"]), p["rows"], p["hidden"], s1)
    else:
        lib.launch_layernorm_bw(_ptr(a["gamma_grad"]), _ptr(a["betta_grad"]), _ptr(a["inp_grad"]),
                                _ptr(a["out_grad"]), _ptr(a["inp"]), _ptr(a["gamma"]), _ptr(a["beta"]),
                                _ptr(a["vars"]), _ptr(a["means"]), p["rows"], p["hidden"], s1, s2)


# --------------------------------------------------------------------------- verifying


def verify(case: Case, outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]) -> CheckResult:
    """Compare the outputs (after the call) with reference()'s or binding_reference()'s,
    with the course's tolerance for the case's kind. A missing output fails."""
    missing = [n for n in expected if n not in outputs]
    if missing:
        return CheckResult(False, float("inf"), None, case.shape, f"missing output(s) {missing}", missing[0])
    atol, rtol = TOLERANCES[case.kind]
    return compare({n: (outputs[n], expected[n]) for n in expected}, atol, rtol, case.shape)


def run_in_process(lib: Any, case: Case, rng: np.random.Generator, streams: tuple[Any, ...] = ()) -> CheckResult:
    """All steps in this process (tests and trusted kits only; the grader splits them)."""
    arrays = make_inputs(case, rng)
    expected = reference(case, arrays)
    abi_call(lib, case, arrays, streams)
    return verify(case, {n: arrays[n] for n in abi_output_names(case)}, expected)
