"""Compatibility layer: the C-ABI checks of llmsys_hw4's kernels, as the GPU suite and the
mutant suite use them. Every piece of logic lives in the grader's trusted library:
rubrics/hw4/cases.py (case lists from rubrics/hw4/rubric.yaml, tolerances), case_inputs.py (inputs),
references.py (float64 references, verification) and abi.py (the C ABI); this module only
keeps the older names and `Case.run(lib, rng)`.

    from kit_checks import load_softmax_lib, SOFTMAX_FW_CASES
    lib = load_softmax_lib("minitorch/cuda_kernels/softmax_kernel.so")
    result = SOFTMAX_FW_CASES[0].run(lib, np.random.default_rng(0))
    assert result.ok, result.describe()

Imports only the standard library, numpy, PyYAML and those modules (child processes
import this file by path, so the repository root is put on sys.path here).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

_ROOT = str(Path(__file__).resolve().parent.parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from rubrics.hw4 import abi as _abi  # noqa: E402
from rubrics.hw4 import case_inputs as _inputs  # noqa: E402
from rubrics.hw4 import cases as _c  # noqa: E402
from rubrics.hw4 import references as _refs  # noqa: E402
from rubrics.hw4.case_inputs import softmax_rows  # noqa: E402,F401  (re-exported)
from rubrics.hw4.cases import LN_EPS, PAD_VALUE, TOLERANCES  # noqa: E402,F401  (re-exported)
from worker.checks import CheckResult, compare  # noqa: E402,F401  (re-exported)

TOL_SOFTMAX_FW = TOLERANCES["softmax_fw"]
TOL_SOFTMAX_BW = TOLERANCES["softmax_bw"]
TOL_LAYERNORM_FW = TOLERANCES["layernorm_fw"]
TOL_LAYERNORM_BW = TOLERANCES["layernorm_bw"]

softmax_fw_reference = _refs.softmax_fw_ref
softmax_bw_reference = _refs.softmax_bw_ref
layernorm_fw_reference = _refs.layernorm_fw_ref
layernorm_bw_reference = _refs.layernorm_bw_ref


def load_softmax_lib(path: str | Path):
    return _abi.load_abi("softmax", path)


def load_layernorm_lib(path: str | Path):
    return _abi.load_abi("layernorm", path)


def make_mask(rng: np.random.Generator, batch: int, to_len: int, kind: str) -> np.ndarray:
    return _inputs.make_mask(rng, batch, to_len, "neginf" if kind == "inf" else kind)


class Case(_c.Case):
    """A rubrics.hw4.cases.Case that can run itself in this process: fresh inputs per call."""

    def run(self, lib, rng: np.random.Generator, *, stream=None, stream_1=None, stream_2=None) -> CheckResult:
        return _abi.run_in_process(lib, self, rng, (stream if stream is not None else stream_1, stream_2))

    @classmethod
    def of(cls, case: _c.Case) -> Case:
        return cls(case.id, case.kind, case.problem, case.params, case.public)


def _adhoc(kind: str, **params) -> Case:
    return Case.of(_c.make_case(kind, **params))


def check_softmax_fw(lib, batch, nhead, from_len, to_len, mask_future, rng, *, mask="pad", scale=1.0,
                     stream=None) -> CheckResult:
    case = _adhoc("softmax_fw", batch=batch, nhead=nhead, from_len=from_len, to_len=to_len,
                  mask_future=bool(mask_future), mask="neginf" if mask == "inf" else mask, scale=scale)
    return case.run(lib, rng, stream=stream)


def check_softmax_bw(lib, rows, softmax_len, rng, *, scale=1.0, stream=None) -> CheckResult:
    return _adhoc("softmax_bw", rows=rows, softmax_len=softmax_len, scale=scale).run(lib, rng, stream=stream)


def check_layernorm_fw(lib, rows, hidden_dim, rng, *, scale=1.0, offset=0.0, stream=None) -> CheckResult:
    """Compares ln_res, means and vars."""
    case = _adhoc("layernorm_fw", rows=rows, hidden=hidden_dim, scale=scale, offset=offset)
    return case.run(lib, rng, stream=stream)


def check_layernorm_bw(lib, rows, hidden_dim, rng, *, scale=1.0, offset=0.0, stream_1=None,
                       stream_2=None) -> CheckResult:
    case = _adhoc("layernorm_bw", rows=rows, hidden=hidden_dim, scale=scale, offset=offset)
    return case.run(lib, rng, stream_1=stream_1, stream_2=stream_2)


_BY_PROBLEM = _c.load_cases("hw4")
SOFTMAX_FW_CASES: list[Case] = [Case.of(c) for c in _BY_PROBLEM["1.1"]]
SOFTMAX_BW_CASES: list[Case] = [Case.of(c) for c in _BY_PROBLEM["1.2"]]
LAYERNORM_FW_CASES: list[Case] = [Case.of(c) for c in _BY_PROBLEM["2.1"]]
LAYERNORM_BW_CASES: list[Case] = [Case.of(c) for c in _BY_PROBLEM["2.2"]]

ALL_CASES: dict[str, list[Case]] = {
    "softmax_fw": SOFTMAX_FW_CASES,
    "softmax_bw": SOFTMAX_BW_CASES,
    "layernorm_fw": LAYERNORM_FW_CASES,
    "layernorm_bw": LAYERNORM_BW_CASES,
}
