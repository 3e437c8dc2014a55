"""worker.checks: one tolerance comparison for every assignment's correctness cases."""
from __future__ import annotations

import numpy as np

from worker.checks import compare


def test_within_tolerance_passes_and_names_the_largest_error() -> None:
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    result = compare({"y": (ref + 1e-4, ref)}, 1e-3, 0.0, (2, 2))
    assert result.ok and result.where is None and result.message == ""
    assert result.max_where is not None and result.max_where[0] == "y" and result.max_err < 2e-4


def test_the_first_failing_element_and_the_largest_error_are_both_told() -> None:
    ref = np.zeros((2, 3))
    got = ref.copy()
    got[0, 2], got[1, 1] = 0.5, 9.0  # first out of tolerance, then the worst
    result = compare({"y": (got, ref)}, 1e-2, 1e-2, (2, 3))
    assert not result.ok and result.where == (0, 2) and result.output == "y" and result.max_err == 9.0
    assert result.message == ("y: 2 of 6 elements out of tolerance (atol=0.01, rtol=0.01); got 0.5, expected 0; "
                              "largest error at y[1, 1]")


def test_nan_fails_and_counts_as_an_infinite_error() -> None:
    ref = np.ones(4)
    got = ref.copy()
    got[3] = np.nan
    result = compare({"out": (got, ref)}, 1.0, 1.0, (4,))
    assert not result.ok and result.where == (3,) and result.max_err == float("inf")


def test_outputs_are_checked_in_order_and_a_wrong_shape_fails() -> None:
    ok, bad = (np.ones(3), np.ones(3)), (np.ones(3) * 2, np.ones(3))
    assert compare({"a": ok, "b": bad}, 1e-6, 1e-6, (3,)).output == "b"
    wrong = compare({"a": (np.ones(2), np.ones(3))}, 1e-6, 1e-6, (3,))
    assert not wrong.ok and wrong.message == "a has shape (2,), expected (3,)"


def test_an_output_named_out_reads_without_doubled_words() -> None:
    """The usual output name `out` once read "elements of out out of tolerance"."""
    ref = np.zeros(4)
    result = compare({"out": (ref + 1.0, ref)}, 1e-3, 0.0, (4,))
    assert result.message.startswith("out: 4 of 4 elements out of tolerance (atol=0.001, rtol=0); got 1, expected 0")
    assert "out out" not in result.message
