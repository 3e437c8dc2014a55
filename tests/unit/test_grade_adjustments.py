"""Staff adjustments in the one final grade (grader.course.grades.final_grade): raw - late penalty +
adjustments, clamped to [0, total]; the reasons in the grade's words."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from grader.course.deadlines import LatePolicy, evaluate
from grader.course.grades import Adjustment, final_grade

DUE = datetime(2026, 3, 20, 3, 59, 59, tzinfo=UTC)
POLICY = LatePolicy(due_at=DUE, grace=timedelta(hours=1), late_window=timedelta(days=3), penalty_per_day=0.1)
AT = DUE + timedelta(days=5)


def adjustment(points: float, reason: str = "Hand-checked the softmax kernel") -> Adjustment:
    return Adjustment(points, reason, "ta", AT)


def test_an_adjustment_is_added_after_the_late_penalty_in_full() -> None:
    late = evaluate(POLICY, DUE + timedelta(days=1, hours=2))  # 20% off
    grade = final_grade(80, 100, late, (adjustment(5),))
    assert (grade.raw, grade.penalty, grade.adjusted, grade.final) == (80, 16, 5, 69)
    assert grade.reason.endswith("80 - 16 = 64 of 100 points. Adjusted by staff: +5 (Hand-checked the softmax "
                                 "kernel), so 69 of 100 points.")


def test_adjustments_add_up_and_the_final_is_clamped_to_the_points() -> None:
    on_time = evaluate(POLICY, DUE)
    both = final_grade(50, 100, on_time, (adjustment(10, "Flaky GPU"), adjustment(-2.5, "Partly copied")))
    assert (both.adjusted, both.final, both.penalty) == (7.5, 57.5, 0)
    assert "+10 (Flaky GPU); -2.5 (Partly copied)" in both.reason
    assert final_grade(95, 100, on_time, (adjustment(10),)).final == 100
    below = final_grade(3, 100, on_time, (adjustment(-5),))
    assert (below.final, below.adjusted) == (0, -5)  # the adjustment itself is kept as given


def test_without_adjustments_the_grade_is_the_late_policys() -> None:
    grade = final_grade(96.75, 100, evaluate(POLICY, DUE + timedelta(days=1, hours=2)))
    assert (grade.final, grade.penalty, grade.adjusted, grade.adjustments) == (77.4, 19.35, 0, ())
    assert "Adjusted" not in grade.reason
