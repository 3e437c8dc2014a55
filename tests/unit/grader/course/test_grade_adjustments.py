"""The staff's entries in the one final grade (grader.course.grades.student_grade): the counted
run's grade (raw - late penalty) + adjustments, clamped to [0, total + extra credit]; a manual
grade replaces the run's (not charged for lateness) until taken back; the entries are the
student's, so the same entries give the same adjustment on whichever run counts; the reasons
in the grade's words."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from grader.course.deadlines import LatePolicy, evaluate
from grader.course.grades import Adjustment, final_grade, student_grade

DUE = datetime(2026, 3, 20, 3, 59, 59, tzinfo=UTC)
POLICY = LatePolicy(due_at=DUE, grace=timedelta(hours=1), late_window=timedelta(days=3), penalty_per_day=0.1)
AT = DUE + timedelta(days=5)
ON_TIME = evaluate(POLICY, DUE)


def adjustment(points: float, reason: str = "Hand-checked the softmax kernel") -> Adjustment:
    return Adjustment(points, reason, "ta", AT)


def manual(points: float | None, reason: str = "The zip could not be graded") -> Adjustment:
    return Adjustment(points, reason, "prof", AT, manual=True)


def test_an_adjustment_is_added_after_the_late_penalty_in_full() -> None:
    late = final_grade(80, 100, evaluate(POLICY, DUE + timedelta(days=1, hours=2)))  # 20% off
    grade = student_grade(late, (adjustment(5),), 100)
    assert grade is not None
    assert (grade.raw, grade.penalty, grade.adjusted, grade.final) == (80, 16, 5, 69)
    assert grade.reason.endswith("80 - 16 = 64 of 100 points. Adjusted by staff: +5 (Hand-checked the softmax "
                                 "kernel), so 69 of 100 points.")


def test_adjustments_add_up_and_the_final_is_clamped_to_the_points() -> None:
    run = final_grade(50, 100, ON_TIME)
    both = student_grade(run, (adjustment(10, "Flaky GPU"), adjustment(-2.5, "Partly copied")), 100)
    assert both is not None and (both.adjusted, both.final, both.penalty) == (7.5, 57.5, 0)
    assert "+10 (Flaky GPU); -2.5 (Partly copied)" in both.reason
    assert student_grade(final_grade(95, 100, ON_TIME), (adjustment(10),), 100).final == 100  # type: ignore[union-attr]
    below = student_grade(final_grade(3, 100, ON_TIME), (adjustment(-5),), 100)
    assert below is not None and (below.final, below.adjusted) == (0, -5)  # the adjustment itself is kept as given


def test_extra_credit_lets_a_grade_pass_the_total_up_to_its_allowance() -> None:
    run = final_grade(95, 100, ON_TIME)
    assert student_grade(run, (adjustment(10),), 100, extra_credit=10).final == 105  # type: ignore[union-attr]
    assert student_grade(run, (adjustment(30),), 100, extra_credit=10).final == 110  # type: ignore[union-attr]
    assert student_grade(run, (), 100, extra_credit=10).final == 95  # type: ignore[union-attr]


def test_the_same_entries_adjust_whichever_run_counts() -> None:
    entries = (adjustment(5, "The timeout was ours"),)
    first = student_grade(final_grade(60, 100, ON_TIME), entries, 100)
    later = student_grade(final_grade(72, 100, ON_TIME), entries, 100)
    assert first is not None and later is not None and (first.final, later.final) == (65, 77)


def test_a_manual_grade_replaces_the_run_and_is_not_charged_for_lateness() -> None:
    late = final_grade(80, 100, evaluate(POLICY, DUE + timedelta(days=1, hours=2)))
    grade = student_grade(late, (adjustment(5), manual(90, "Graded by hand")), 100)
    assert grade is not None and (grade.final, grade.manual_points, grade.late) == (95, 90, False)
    assert grade.reason == ("Manual grade by prof: 90 of 100 points (Graded by hand). Adjusted by staff: "
                            "+5 (Hand-checked the softmax kernel), so 95 of 100 points.")
    back = student_grade(late, (manual(90), manual(None, "A run graded after all")), 100)
    assert back is not None and (back.final, back.manual) == (64, None)  # the run's grade again


def test_a_manual_grade_without_any_run_and_no_grade_without_either() -> None:
    exempt = student_grade(None, (manual(100, "Exempt: medical leave"),), 100)
    assert exempt is not None and (exempt.final, exempt.raw, exempt.status, exempt.penalty) == (100, None, "no_run", 0)
    assert exempt.reason == "Manual grade by prof: 100 of 100 points (Exempt: medical leave)."
    assert student_grade(None, (), 100) is None
    assert student_grade(None, (manual(50), manual(None, "Taken back")), 100) is None


def test_without_entries_the_grade_is_the_late_policys() -> None:
    run = final_grade(96.75, 100, evaluate(POLICY, DUE + timedelta(days=1, hours=2)))
    grade = student_grade(run, (), 100)
    assert grade is not None and (grade.final, grade.penalty, grade.adjusted, grade.adjustments) == (77.4, 19.35, 0, ())
    assert "Adjusted" not in grade.reason


def test_a_clamp_that_cuts_an_adjustment_is_said() -> None:
    """+2 on a 10/10 run stays 10: the grade says it was capped (and where), not only "adjusted +2"."""
    full = student_grade(final_grade(10, 10, ON_TIME), (adjustment(2, "Nice write-up"),), 10)
    assert full is not None and (full.final, full.adjusted, full.clamped_to) == (10, 2, 10)
    assert full.clamp_words == "capped at 10"
    assert full.reason.endswith("Adjusted by staff: +2 (Nice write-up), so 10 of 10 points (capped at 10: the "
                                "most the assignment allows).")
    extra = student_grade(final_grade(10, 10, ON_TIME), (adjustment(5),), 10, extra_credit=2)
    assert extra is not None and (extra.final, extra.clamped_to, extra.clamp_words) == (12, 12, "capped at 12")
    assert "(capped at 12: the most the assignment allows with 2 of extra credit)" in extra.reason
    low = student_grade(final_grade(3, 10, ON_TIME), (adjustment(-5),), 10)
    assert low is not None and (low.final, low.clamped_to, low.clamp_words) == (0, 0, "floored at 0")
    assert low.reason.endswith("so 0 of 10 points (floored at 0: a grade is never below 0).")
    within = student_grade(final_grade(7, 10, ON_TIME), (adjustment(2),), 10)
    assert within is not None and (within.clamped_to, within.clamp_words) == (None, "")
    assert within.reason.endswith("so 9 of 10 points.")
