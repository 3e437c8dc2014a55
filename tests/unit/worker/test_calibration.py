from __future__ import annotations

import pytest

from worker.calibration import calibrated_targets
from worker.measurements import CaseOutcome, ProblemMeasurement
from worker.rubric import load_rubric
from worker.timing import ratio_summary

RUBRIC = load_rubric("hw4")  # 1.1-2.2 score the reference-ops figure, Problem 3 the student's


def _measured(pid: str, speedup: float, ok: bool = True, reference_ops: float | None = None,
              kit: float | None = None) -> ProblemMeasurement:
    def r(x: float | None):  # noqa: ANN202
        return None if x is None else ratio_summary([x] * 5, [1.0] * 5)

    return ProblemMeasurement(problem_id=pid, routes={"abi": [CaseOutcome("c", (1,), ok)]},
                              figures={"student": r(speedup), "reference_ops": r(reference_ops), "trusted": r(kit)})


def test_targets_are_the_median_of_the_correct_submissions_with_a_margin() -> None:
    graded = [_measured("1.1", 9.0, reference_ops=8.0), _measured("1.1", 12.0, reference_ops=10.0),
              _measured("1.1", 30.0, reference_ops=30.0, ok=False),  # not correct: not counted
              _measured("1.1", 11.0, reference_ops=12.0), _measured("2.2", 3.0, reference_ops=4.0)]
    assert calibrated_targets(RUBRIC, graded, margin=0.5) == {"1.1": 5.0, "2.2": 2.0}


def test_targets_come_from_the_figure_the_rubric_scores() -> None:
    """Kernel problems score the reference-ops figure (own basic ops only when it is missing);
    the kit's figure never sets a target; Problem 3 scores the student's own figure."""
    targets = calibrated_targets(RUBRIC, [_measured("2.1", 10.0, reference_ops=8.0, kit=1.0),
                                          _measured("1.2", 6.0), _measured("3", 2.4, kit=0.5)], margin=0.5)
    assert targets == {"2.1": 4.0, "1.2": 3.0, "3": 1.2}


def test_incorrect_or_unmeasured_problems_get_no_target_and_targets_never_drop_below_1x() -> None:
    unmeasured = ProblemMeasurement(problem_id="3", routes={"abi": [CaseOutcome("c", (1,), True)]})
    targets = calibrated_targets(RUBRIC, [_measured("1.1", 4.0, ok=False), unmeasured, _measured("1.2", 1.05)])
    assert targets == {"1.2": 1.0}


def test_margin_must_be_a_fraction() -> None:
    with pytest.raises(ValueError):
        calibrated_targets(RUBRIC, [], margin=1.5)
