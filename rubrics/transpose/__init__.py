"""A float32 matrix transpose as a plug-in (rubrics/transpose/rubric.yaml names this module): one
library call, graded by the engine's generic stage for such problems (worker.library_call).

Correctness: transpose of the student's lib/transpose.so on each case, its output equal to the
input transposed, element for element (a transpose moves values, it computes none). Speed, once
every case passed: transpose against transpose_naive of our own kit on the largest case, the
figure `baseline` that the rubric scores.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from worker.library_call import Case, LibraryProblem, library_plugin

# Shapes that are and are not multiples of a 32-wide tile, one row, one column, and a matrix
# larger than an H100's or H200's L2 cache (4096 x 4096 floats, 64 MiB each way) to time.
CASES = (Case("1x1", (1, 1), True), Case("1x37", (1, 37), True), Case("37x1", (37, 1), True),
         Case("33x31", (33, 31), True), Case("1000x3", (1000, 3), True),
         Case("1025x2049", (1025, 2049), False), Case("4096x4096", (4096, 4096), False))


def make_input(rng: np.random.Generator, case: Case) -> np.ndarray:
    """Distinct values (a permutation of 1..n), so any element out of place is an error."""
    n = int(np.prod(case.shape))
    return (rng.permutation(n) + 1).astype(np.float32).reshape(case.shape)


def transposed(values: np.ndarray) -> np.ndarray:
    return values.T.astype(np.float64)


def exact(_values: np.ndarray) -> float:
    return 0.0


PROBLEM = LibraryProblem(
    problem_id="1", operations=Path(__file__).with_name("gpu_child.py"), library="lib/transpose.so",
    function="transpose", baseline="transpose_naive", cases=CASES, timed=CASES[-1],
    make_input=make_input, expected=transposed, tolerance=exact,
)

ASSIGNMENT = library_plugin(PROBLEM, zip_folder="transpose")
