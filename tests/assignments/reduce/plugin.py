"""reduce's plug-in (its rubric.yaml names this module): one library call, graded by the engine's
generic stage for such problems (worker.library_call), so that an assignment other than hw4 is
graded on a GPU with no edit to generic code.

Correctness: reduce_sum of the student's lib/reduce.so on each case against a float64 sum.
Speed, once every case passed: reduce_sum against reduce_sum_naive of our own kit on the largest
case, the figure `baseline` that the rubric scores.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from worker.library_call import Case, LibraryProblem, library_plugin

CASES = (Case("n1", (1,), True), Case("n31", (31,), True), Case("n4097", (4097,), True),
         Case("n1048579", (2**20 + 3,), False), Case("n16777216", (2**24,), False))
# Each value is a nonzero multiple of 1/8 in [-4, 4]: the partial sums of any order stay exact
# in float32 far beyond these lengths, so one element dropped is always an error, and the
# tolerance (relative to the sum of magnitudes) only has to absorb a rare rounding.
RELATIVE_TOLERANCE = 1e-6


def make_input(rng: np.random.Generator, case: Case) -> np.ndarray:
    n = case.shape[0]
    return (rng.integers(1, 33, n) * rng.choice((-1, 1), n) / 8).astype(np.float32)


def expected_sum(values: np.ndarray) -> np.ndarray:
    return np.array([values.astype(np.float64).sum()])


def tolerance(values: np.ndarray) -> float:
    return RELATIVE_TOLERANCE * float(np.abs(values).sum(dtype=np.float64))


PROBLEM = LibraryProblem(
    problem_id="1", operations=Path(__file__).with_name("gpu_child.py"), library="lib/reduce.so",
    function="reduce_sum", baseline="reduce_sum_naive", cases=CASES, timed=CASES[-1],
    make_input=make_input, expected=expected_sum, tolerance=tolerance,
)

ASSIGNMENT = library_plugin(PROBLEM, zip_folder="reduce")
