from __future__ import annotations

import pytest

from worker.calibration import calibrated_targets
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.rubric import load_rubric
from worker.timing import ratio_summary

RUBRIC = load_rubric("hw4")  # 1.1-2.2 score the smaller figure, Problem 3 the student's


def _measured(pid: str, speedup: float, ok: bool = True, trusted: float | None = None) -> ProblemMeasurement:
    return ProblemMeasurement(
        problem_id=pid,
        abi_cases=[CaseOutcome("c", (1,), ok)],
        speedup_student=ratio_summary([speedup] * 5, [1.0] * 5),
        speedup_trusted=None if trusted is None else ratio_summary([trusted] * 5, [1.0] * 5),
    )


def test_targets_are_the_reference_speedups_with_a_margin() -> None:
    targets = calibrated_targets(RUBRIC, [_measured("1.1", 4.0), _measured("2.2", 16.0)], margin=0.9)
    assert targets == {"1.1": 3.6, "2.2": 14.4}


def test_targets_come_from_the_figure_the_rubric_scores() -> None:
    """1.1 scores min(own, reference baseline): the smaller figure sets its target; Problem 3
    scores the student's own figure whatever the other says."""
    targets = calibrated_targets(RUBRIC, [_measured("2.1", 10.0, trusted=8.0), _measured("1.2", 2.0, trusted=3.0),
                                          _measured("3", 2.4, trusted=0.5)], margin=0.5)
    assert targets == {"2.1": 4.0, "1.2": 1.0, "3": 1.2}
    assert calibrated_targets(RUBRIC, [_measured("2.1", 10.0, trusted=8.0)], margin=1.0) == {"2.1": 8.0}


def test_incorrect_or_unmeasured_problems_get_no_target_and_targets_never_drop_below_1x() -> None:
    unmeasured = ProblemMeasurement(problem_id="3", abi_cases=[CaseOutcome("c", (1,), True)])
    targets = calibrated_targets(RUBRIC, [_measured("1.1", 4.0, ok=False), unmeasured, _measured("1.2", 1.05)])
    assert targets == {"1.2": 1.0}


def test_margin_must_be_a_fraction() -> None:
    with pytest.raises(ValueError):
        calibrated_targets(RUBRIC, [], margin=1.5)
