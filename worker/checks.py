"""Tolerance comparison of computed outputs with their references, for every assignment's
correctness cases: the verdict, the largest error and where it is, the first failing element,
in one message format (`CheckResult.message`, which a stage quotes in its CaseOutcome).

Element-wise |got - ref| <= atol + rtol * |ref| (numpy's allclose rule), in float64; NaN or inf
in what was computed fails. Pure numpy: the trusted parent calls it on what a child returned.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass
class CheckResult:
    ok: bool
    max_err: float  # largest |got - ref| over all outputs (inf where got is NaN/inf)
    where: tuple[int, ...] | None  # index of the first failing element (None when ok)
    shape: tuple[int, ...]  # the case's main shape
    message: str = ""
    output: str | None = None  # the output holding `where`
    max_where: tuple[str, tuple[int, ...]] | None = None  # (output, index) of max_err

    def describe(self) -> str:
        status = "ok" if self.ok else "MISMATCH"
        text = f"{status} shape={self.shape} max_err={self.max_err:.3g}"
        if self.where is not None:
            text += f" at {self.output}[{', '.join(map(str, self.where))}]"
        if self.message:
            text += f": {self.message}"
        return text


def compare(outputs: Mapping[str, tuple[np.ndarray, np.ndarray]], atol: float, rtol: float,
            shape: tuple[int, ...]) -> CheckResult:
    """outputs: name -> (got, reference). Element-wise |got - ref| <= atol + rtol * |ref|;
    NaN or inf in `got` fails. Reports the first failing element (outputs in the given
    order, row-major) and the largest error anywhere."""
    max_err, max_where = 0.0, None
    first = None  # (name, idx, got, ref, n_bad, size)
    for name, (got, ref) in outputs.items():
        got64 = np.asarray(got, dtype=np.float64)
        ref64 = np.asarray(ref, dtype=np.float64)
        if got64.shape != ref64.shape:
            return CheckResult(False, float("inf"), None, shape,
                               f"{name} has shape {got64.shape}, expected {ref64.shape}", name)
        if not got64.size:
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(got64 - ref64)
            finite = np.isfinite(got64)
            err = np.where(finite, diff, np.inf)
            err = np.where(np.isnan(err), np.inf, err)
            good = finite & (diff <= atol + rtol * np.abs(ref64))
        k = int(np.argmax(err))
        if err.flat[k] > max_err or max_where is None:
            max_err = max(max_err, float(err.flat[k]))
            max_where = (name, tuple(int(i) for i in np.unravel_index(k, err.shape)))
        if first is None and not good.all():
            idx = tuple(int(i) for i in np.argwhere(~good)[0])
            first = (name, idx, float(got64[idx]), float(ref64[idx]), int((~good).sum()), good.size)
    if first is None:
        return CheckResult(True, max_err, None, shape, max_where=max_where)
    name, idx, g, r, n_bad, size = first
    # The output is named first: "elements of out out of tolerance" read as a doubled phrase
    message = (f"{name}: {n_bad} of {size} elements out of tolerance (atol={atol:g}, rtol={rtol:g}); "
               f"got {g:.7g}, expected {r:.7g}")
    if max_where is not None and (max_where[0], max_where[1]) != (name, idx):
        message += f"; largest error at {max_where[0]}[{', '.join(map(str, max_where[1]))}]"
    return CheckResult(False, max_err, idx, shape, message, name, max_where)
