"""rubrics.hw4.course_shapes: the shapes the course's own kernel tests time."""
from __future__ import annotations

import pytest

from rubrics.hw4.case_inputs import binding_factors
from rubrics.hw4.course_shapes import course_shapes, timing_cases
from rubrics.hw4.speed import TIMING_CASES, describe_timing

# What the official harness (llmsystem/llmsys_hw4 @ e2162e7) printed on the H200, 2026-12-01
# (bench/fidelity.py checks every run against course_shapes as well).
PRINTED = {
    "1.1": [(1, 8, 115, 282), (2, 8, 229, 105), (10, 8, 90, 55), (1, 8, 430, 460), (1, 8, 285, 164)],
    "1.2": [(1, 8, 115, 282), (2, 8, 251, 143), (9, 8, 105, 12), (1, 8, 433, 31), (4, 8, 96, 120)],
    "2.1": [(115, 32), (502, 32), (945, 32), (433, 32), (384, 32)],
    "2.2": [(115, 32), (502, 32), (945, 32), (433, 32), (384, 32)],
}


@pytest.mark.parametrize("pid", sorted(PRINTED))
def test_the_replayed_draws_are_the_shapes_the_harness_printed(pid: str) -> None:
    assert course_shapes(pid) == PRINTED[pid]


def test_the_timing_cases_are_public_cases_of_those_shapes() -> None:
    for pid, shapes in PRINTED.items():
        cases = timing_cases(pid)
        assert [c.problem for c in cases] == [pid] * 5 and all(c.public for c in cases)
        got = [binding_factors(c) if c.kind == "softmax_bw" else c.shape for c in cases]
        assert [tuple(g) for g in got] == shapes
        assert TIMING_CASES[pid] == cases
    assert timing_cases("1.1")[0].params["mask"] == "pad"  # the course's padded keys


def test_no_course_test_no_shapes() -> None:
    with pytest.raises(ValueError):
        course_shapes("3")


def test_the_feedback_names_the_timed_calls_and_shapes() -> None:
    text = describe_timing(TIMING_CASES["1.2"])
    assert text.startswith("Attn_Softmax.backward(ctx, out_grad)")
    assert "the forward run before the clock" in text and "[1, 8, 115, 282]" in text
    assert "forward run" not in describe_timing(TIMING_CASES["2.1"])
