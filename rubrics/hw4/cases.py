"""The case catalogue of llmsys_hw4's kernels (Problems 1.1, 1.2, 2.1, 2.2): the trusted side.

A Case is one (kind, shape, parameters) the grader checks; this module validates them against
the official starter's limits and loads the rubric's lists. The steps that use a case are
separate modules on purpose. In the grader the trusted parent draws the inputs, keeps a copy,
computes the float64 reference and verifies; only the sandboxed child loads the student's
library and calls it:

    parent:  case = cases.load_cases()["2.1"][0]
             arrays = case_inputs.make_inputs(case, rng)    # outputs poisoned with NaN
             expected = references.reference(case, arrays)  # before the call (or on a copy)
    child:   lib = abi.load_abi(case.kind, so_path)
             abi.abi_call(lib, case, arrays)                # in place / into the output buffers
    parent:  result = references.verify(case, {n: arrays[n] for n in abi.abi_output_names(case)},
                                        expected)

The student's MiniTorch binding takes the same cases through case_inputs.make_binding_inputs /
references.binding_reference (tensors instead of raw buffers; see those functions).

Case lists are data: the `cases:` section of rubrics/<slug>.yaml. Every case lies inside the
official starter's domain (rubrics/hw4/CONTRACT.md says where each limit comes from): inputs
uniform(-1, 1) (times `scale`, plus `offset`) as the course's `kt.rand` draws them, a mask
array always passed (the starter's launcher copies it unconditionally; zeros stand for "no
mask"), to_len <= 1024, rows of a softmax backward a multiple of 4 (the given
ker_attn_softmax_bw has no row guard), hidden_dim % 4 == 0 and <= 4096, and no input where the
open eps convention of the LayerNorm backward (sqrt(var) or sqrt(var + eps)) decides a verdict.
Tolerances are the course's (HW4_INTERFACE.md): |got - ref| <= atol + rtol * |ref|
element-wise, and NaN or inf in an output never passes; the rubric's `cases:` comment gives
the float32 error analysis that shows they hold for every case there.

Dependencies of these four modules: the standard library, numpy and PyYAML only (they run on
the bare GPU machine).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from worker.rubric import RubricError, find_rubric

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
# A LayerNorm backward may read its `inp` as the forward's output (LightSeq's convention, which
# the starter's comments allow: rubrics/hw4/conventions.py) and recover x̂ = (out - beta) / gamma,
# which amplifies the output's float32 rounding by 1 / |gamma|. With gamma uniform(-1, 1) as the
# course draws it, a [1024, 4096] case's gamma_grad then misses its tolerance in ~2 draws of 100
# (a gamma within ~4e-5 of zero; the course's harness fails such a backward the same way, at
# random), so over ~40 cases a correct backward lost points in some grades and not in others.
# A backward's gamma keeps |gamma| >= this instead: no reading then decides a verdict by luck.
MIN_ABS_GAMMA = 0.1

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
        if self.kind == "layernorm_fw":
            return f"inp {list(self.shape)} {spread}, gamma and beta [{p['hidden']}] uniform(-1, 1)"
        return (f"inp {list(self.shape)} {spread}, gamma [{p['hidden']}] uniform(-1, 1) with |gamma| "
                f">= {MIN_ABS_GAMMA:g}, beta [{p['hidden']}] and out_grad uniform(-1, 1)")

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


def _check_softmax_fw(p: dict[str, Any]) -> None:
    for k in ("batch", "nhead", "from_len", "to_len"):
        _positive_int(k, p[k])
    if not isinstance(p["mask_future"], bool):
        raise CaseError(f"mask_future must be a bool, not {p['mask_future']!r}")
    if p["mask"] not in MASK_KINDS:
        raise CaseError(f"mask must be one of {MASK_KINDS}, not {p['mask']!r}")
    if p["to_len"] > MAX_SOFTMAX_LEN["softmax_fw"]:
        raise CaseError(f"to_len {p['to_len']} > {MAX_SOFTMAX_LEN['softmax_fw']}")


def _check_softmax_bw(p: dict[str, Any]) -> None:
    """Also fills in `rows` from batch, nhead and from_len when those are given instead."""
    _positive_int("softmax_len", p["softmax_len"])
    if p["softmax_len"] > MAX_SOFTMAX_LEN["softmax_bw"]:
        raise CaseError(f"softmax_len {p['softmax_len']} > {MAX_SOFTMAX_LEN['softmax_bw']}")
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


def _check_layernorm(p: dict[str, Any]) -> None:
    _positive_int("rows", p["rows"])
    _positive_int("hidden", p["hidden"])
    if p["hidden"] % 4:
        raise CaseError(f"hidden {p['hidden']} is not a multiple of 4 (float4 loads)")
    if p["hidden"] > MAX_LN_HIDDEN:
        raise CaseError(f"hidden {p['hidden']} > {MAX_LN_HIDDEN}")
    if p["scale"] < MIN_LN_SCALE:
        raise CaseError(f"scale {p['scale']:g} < {MIN_LN_SCALE:g}: the open eps convention would decide")


# Each kind's own checks of its (defaults-filled) parameters; the layernorm kinds share theirs.
_KIND_CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "softmax_fw": _check_softmax_fw, "softmax_bw": _check_softmax_bw,
    "layernorm_fw": _check_layernorm, "layernorm_bw": _check_layernorm,
}


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
    _KIND_CHECKS[kind](p)
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
        try:
            path = find_rubric(str(rubric_path_or_slug))
        except RubricError as exc:
            raise CaseError(str(exc)) from exc
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
