"""The one final grade (grader.course.grades): raw score, penalty, final and the reason in words, and
the upload page's deadlines with the time left, from a schedule and an upload time."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from grader.course.deadlines import Extension, LatePolicy, evaluate
from grader.course.grades import Deadlines, final_grade

DUE = datetime(2026, 3, 20, 3, 59, 59, tzinfo=UTC)
POLICY = LatePolicy(due_at=DUE, grace=timedelta(hours=1), late_window=timedelta(days=3), penalty_per_day=0.1)
NY = ZoneInfo("America/New_York")


def test_a_late_grade_says_what_was_taken_and_why_in_the_course_zone() -> None:
    grade = final_grade(96.75, 100, evaluate(POLICY, DUE + timedelta(days=1, hours=2)).in_zone(NY))
    assert (grade.raw, grade.final, grade.penalty, grade.late, grade.status) == (96.75, 77.4, 19.35, True, "late")
    assert grade.reason == ("Uploaded 1 d 2 h after the due time 2026-03-19 23:59:59 EDT: 2 started day(s) after "
                            "the grace x 10% = 20% off: 96.75 - 19.35 = 77.4 of 100 points.")


def test_on_time_and_grace_keep_the_raw_score() -> None:
    on_time = final_grade(50, 100, evaluate(POLICY, DUE))
    assert (on_time.final, on_time.penalty, on_time.late) == (50, 0, False)
    assert on_time.reason == "On time: due 2026-03-20 03:59:59 UTC."
    grace = final_grade(50, 100, evaluate(POLICY, DUE + timedelta(minutes=5)))
    assert (grace.final, grace.late, grace.status) == (50, False, "grace")
    assert grace.reason.startswith("Uploaded 5 min after the due time") and grace.reason.endswith("no penalty.")


def test_deadlines_and_time_left_follow_the_next_bound() -> None:
    before = Deadlines(evaluate(POLICY, DUE - timedelta(hours=3), Extension(timedelta(days=1)), NY))
    assert before.due_at == DUE + timedelta(days=1) and before.extended_by == "1 d"
    assert before.time_left == "1 d 3 h until the due time"
    assert before.shown(before.grace_ends) == "2026-03-21 00:59:59 EDT"
    in_grace = Deadlines(evaluate(POLICY, DUE + timedelta(minutes=20)))
    assert in_grace.time_left == "40 min of the grace period"
    late = Deadlines(evaluate(POLICY, DUE + timedelta(days=2)))
    assert late.time_left == "1 d until the late window closes" and late.penalty_now == 0.2
    assert in_grace.penalty_now is None and before.penalty_now is None
    opens = DUE - timedelta(days=5)
    not_yet = Deadlines(evaluate(LatePolicy(release_at=opens, due_at=DUE), opens - timedelta(hours=1)))
    assert not_yet.time_left == "5 d 1 h until the due time"
    assert Deadlines(evaluate(POLICY, DUE + timedelta(days=4))).time_left is None
    assert Deadlines(evaluate(LatePolicy(), DUE)).time_left is None


def test_a_staff_upload_outside_the_window_is_charged_and_says_so() -> None:
    after = final_grade(80, 100, evaluate(POLICY, DUE + timedelta(days=4)))
    assert (after.final, after.penalty, after.late, after.status) == (0, 80, True, "closed")
    assert after.reason == "Uploaded after the late window closed at 2026-03-23 03:59:59 UTC: 80 - 80 = 0 of 100 points."
    opens = LatePolicy(release_at=DUE - timedelta(days=1), due_at=DUE)
    early = final_grade(80, 100, evaluate(opens, DUE - timedelta(days=2)))
    assert early.late and early.reason.startswith("Uploaded before the release (the assignment opens at 2026-03-19")
