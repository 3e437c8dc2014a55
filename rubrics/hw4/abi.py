"""The C ABI of hw4's kernel libraries: the buffers each launch function takes, loading the
library with its signatures, and calling it on one case's arrays.

This is the side that runs in the sandboxed child (rubrics.hw4.child_kernels): it loads the
student's .so and writes into buffers the parent drew (rubrics.hw4.case_inputs) and verifies
afterwards (rubrics.hw4.references). run_in_process does all three steps in one process, for
tests and trusted kits only. The launchers' signatures and limits: rubrics/hw4/CONTRACT.md.
"""
from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rubrics.hw4.case_inputs import make_inputs
from rubrics.hw4.cases import Case, CaseError
from rubrics.hw4.references import reference, verify
from worker.checks import CheckResult


def family(kind: str) -> str:
    return kind.split("_")[0]  # softmax_fw -> softmax


def prepared_forward(kind: str, variant: str) -> str | None:
    """The forward the binding runs while it prepares a computation of a backward `kind`,
    before the clock as the course's tests do (rubrics.hw4.child_kernels' `binding_forward`):
    the fused op's ("custom"), or the softmax composition's nn.softmax ("baseline"); None for
    a forward kind. Only "custom" reaches a launcher (rubrics.hw4.hangs)."""
    if kind.endswith("_fw"):
        return None
    return "baseline" if kind == "softmax_bw" and variant != "custom" else "custom"


def library_of(kind: str) -> str:
    """The built library, relative to the submission's root, whose launcher a case kind calls."""
    return f"minitorch/cuda_kernels/{family(kind)}_kernel.so"


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


# The arrays a launch function updates in place: read and written by the kernels.
IN_PLACE = {"softmax_fw": ("inp",), "softmax_bw": ("out_grad",), "layernorm_fw": (), "layernorm_bw": ()}


def traffic_bytes(case: Case) -> int:
    """The device memory traffic the operation cannot avoid: every array of the call read or
    written once (float32), an in-place one both. A kernel's bytes over its time is its
    achieved bandwidth; softmax and LayerNorm are memory-bound, so that is the figure to set
    beside the GPU's peak."""
    elements = sum(math.prod(shape) for shape in abi_shapes(case).values())
    elements += sum(math.prod(abi_shapes(case)[name]) for name in IN_PLACE[case.kind])
    return 4 * elements


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


def launcher_of(kind: str) -> str:
    """The launch function a case kind calls."""
    [name] = _FUNCTIONS[kind]
    return name


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


def run_in_process(lib: Any, case: Case, rng: np.random.Generator, streams: tuple[Any, ...] = ()) -> CheckResult:
    """All steps in this process (tests and trusted kits only; the grader splits them)."""
    arrays = make_inputs(case, rng)
    expected = reference(case, arrays)
    abi_call(lib, case, arrays, streams)
    return verify(case, {n: arrays[n] for n in abi_output_names(case)}, expected)
