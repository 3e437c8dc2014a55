"""Readings of a launcher's arguments that the starter's comments leave open (trusted side).

The starter documents launch_layernorm_bw in LightSeq's words: `inp` is the LayerNorm output
"if means is nullptr", the input otherwise, and "(gamma && betta) ^ (vars && means) should be
true". The course's harness reaches the launcher only through the student's own binding, so
whatever reading a student's binding and kernel agree on passes there. kernelgrade's C ABI
cases must not decide points by picking one: a case whose outputs are wrong under the
starter's own reading (its launcher copies every pointer, so `inp` is the input) is run again
under each open reading of its kind, and passes, naming the reading, if one holds
(rubrics.hw4.kernel_checks.check_abi_case).

Not tried: a NULL `means` (LightSeq's own way to say "output"). The starter's launcher copies
`means` from the host unconditionally and exits on the CUDA error a NULL pointer raises, so
that call would end the child, not test a reading; the readings here pass every pointer.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rubrics.hw4.references import layernorm_fw_ref

Arrays = dict[str, np.ndarray]

@dataclass(frozen=True)
class Reading:
    """One open reading of a launcher's arguments."""

    name: str  # how the feedback names it
    # make_inputs' arrays -> the arrays handed to the launcher under this reading; the expected
    # outputs stay those of make_inputs' arrays in the starter's meaning
    rewrite: Callable[[Arrays], Arrays]


def _layernorm_output_as_inp(arrays: Arrays) -> Arrays:
    # A backward's gamma is drawn away from zero (cases.MIN_ABS_GAMMA), so x̂ = (out - betta) /
    # gamma loses little to the output's float32 rounding.
    out = layernorm_fw_ref(arrays["inp"], arrays["gamma"], arrays["beta"])[0]
    return {**arrays, "inp": np.ascontiguousarray(out, dtype=np.float32)}


LAYERNORM_OUTPUT = Reading(
    name="`inp` as the LayerNorm output (LightSeq's convention, which the starter's comments allow)",
    rewrite=_layernorm_output_as_inp,
)

OPEN_READINGS: dict[str, tuple[Reading, ...]] = {"layernorm_bw": (LAYERNORM_OUTPUT,)}


def open_readings(kind: str) -> tuple[Reading, ...]:
    """The readings, besides the starter's own, under which a C ABI case of `kind` may pass."""
    return OPEN_READINGS.get(kind, ())
