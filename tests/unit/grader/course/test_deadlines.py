"""grader.course.deadlines: every status at its boundaries, extensions, rounding and validation."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from grader.course.deadlines import Extension, LatePolicy, LateStatus, evaluate

RELEASE = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
DUE = datetime(2026, 3, 20, 3, 59, 59, tzinfo=UTC)
SECOND = timedelta(seconds=1)
GRACE = timedelta(hours=2)
# grace 2 h, then 10 % per started day, closed 3 days after the due time
POLICY = LatePolicy(release_at=RELEASE, due_at=DUE, grace=GRACE, late_window=timedelta(days=3),
                    penalty_per_day=0.10)


def status(at: datetime, policy: LatePolicy = POLICY, extension: Extension | None = None) -> LateStatus:
    return evaluate(policy, at, extension).status


def test_before_release_is_refused() -> None:
    result = evaluate(POLICY, RELEASE - SECOND)
    assert result.status is LateStatus.not_released
    assert not result.accepted and result.multiplier == 0.0
    assert "opens at 2026-03-02 14:00:00 UTC" in result.reason


def test_exactly_at_release_is_on_time() -> None:
    assert status(RELEASE) is LateStatus.on_time


def test_exactly_at_due_is_on_time_with_full_credit() -> None:
    result = evaluate(POLICY, DUE)
    assert result.status is LateStatus.on_time and result.multiplier == 1.0 and result.accepted
    assert result.adjust(87.5) == 87.5


def test_one_second_after_due_is_in_grace_without_penalty() -> None:
    result = evaluate(POLICY, DUE + SECOND)
    assert result.status is LateStatus.grace and result.multiplier == 1.0
    assert "1 s after the due time" in result.reason and "2 h grace" in result.reason


def test_inside_and_exactly_at_grace_end() -> None:
    assert status(DUE + timedelta(minutes=59)) is LateStatus.grace
    assert status(DUE + GRACE) is LateStatus.grace


def test_one_second_after_grace_costs_a_whole_day() -> None:
    result = evaluate(POLICY, DUE + GRACE + SECOND)
    assert result.status is LateStatus.late
    assert result.penalty_days == 1 and result.multiplier == pytest.approx(0.9)
    assert result.adjust(80.0) == pytest.approx(72.0)
    assert "10% off" in result.reason


def test_started_days_round_up() -> None:
    assert evaluate(POLICY, DUE + GRACE + timedelta(days=1)).penalty_days == 1
    assert evaluate(POLICY, DUE + GRACE + timedelta(days=1) + SECOND).penalty_days == 2
    assert evaluate(POLICY, DUE + GRACE + timedelta(days=2, hours=5)).multiplier == pytest.approx(0.7)


def test_exactly_at_window_end_is_late_and_a_second_after_is_closed() -> None:
    end = DUE + timedelta(days=3)
    last = evaluate(POLICY, end)
    assert last.status is LateStatus.late and last.penalty_days == 3 and last.accepted
    closed = evaluate(POLICY, end + SECOND)
    assert closed.status is LateStatus.closed and closed.multiplier == 0.0 and not closed.accepted
    assert "late window closed at 2026-03-23 03:59:59 UTC" in closed.reason


def test_a_refused_upload_is_told_why_in_a_sentence() -> None:
    """Before the release and after the late window (an extension included), the refusal is
    a whole sentence naming the assignment and the instant, not a fragment of the reason."""
    assert evaluate(POLICY, RELEASE - SECOND).refusal("hw4") == (
        "Uploads to hw4 open at 2026-03-02 14:00:00 UTC; it takes none before.")
    end = DUE + timedelta(days=3)
    assert evaluate(POLICY, end).refusal("hw4") is None
    assert evaluate(POLICY, end + SECOND).refusal("hw4") == (
        "Uploads to hw4 closed at 2026-03-23 03:59:59 UTC, when its late window ended; it takes no more.")
    extended = evaluate(POLICY, end + timedelta(days=3), Extension(timedelta(days=2)))
    assert extended.refusal("hw4") == ("Uploads to hw4 closed at 2026-03-25 03:59:59 UTC (your extension of 2 d "
                                       "included), when its late window ended; it takes no more.")


def test_penalty_never_goes_below_zero() -> None:
    steep = LatePolicy(due_at=DUE, late_window=timedelta(days=5), penalty_per_day=0.3)
    assert evaluate(steep, DUE + timedelta(days=4, hours=1)).multiplier == 0.0


def test_without_grace_one_second_late_is_late() -> None:
    strict = LatePolicy(due_at=DUE, late_window=timedelta(days=1), penalty_per_day=0.25)
    result = evaluate(strict, DUE + SECOND)
    assert result.status is LateStatus.late and result.multiplier == pytest.approx(0.75)


def test_grace_days_only_then_closed() -> None:
    grace_only = LatePolicy(due_at=DUE, grace=timedelta(days=2), late_window=timedelta(days=2))
    assert status(DUE + timedelta(days=2), grace_only) is LateStatus.grace
    assert status(DUE + timedelta(days=2) + SECOND, grace_only) is LateStatus.closed


def test_no_late_window_closes_right_after_due() -> None:
    hard = LatePolicy(due_at=DUE)
    assert status(DUE, hard) is LateStatus.on_time
    assert status(DUE + SECOND, hard) is LateStatus.closed


def test_extension_moves_due_grace_and_window() -> None:
    ext = Extension(timedelta(days=2), "medical")
    assert status(DUE + timedelta(days=2), extension=ext) is LateStatus.on_time
    assert status(DUE + timedelta(days=2) + SECOND, extension=ext) is LateStatus.grace
    assert status(DUE + timedelta(days=2) + GRACE + SECOND, extension=ext) is LateStatus.late
    assert status(DUE + timedelta(days=5) + SECOND, extension=ext) is LateStatus.closed
    result = evaluate(POLICY, DUE + timedelta(days=1), ext)
    assert result.due_at == DUE + timedelta(days=2)
    assert "extended by 2 d" in result.reason


def test_extension_does_not_move_release() -> None:
    assert status(RELEASE - SECOND, extension=Extension(timedelta(days=7))) is LateStatus.not_released


def test_no_due_date_is_always_on_time_after_release() -> None:
    open_ended = LatePolicy(release_at=RELEASE)
    result = evaluate(open_ended, RELEASE + timedelta(days=400))
    assert result.status is LateStatus.on_time and result.due_at is None


def test_other_zones_compare_by_instant_and_reasons_use_the_course_zone() -> None:
    pittsburgh = ZoneInfo("America/New_York")
    at = DUE.astimezone(pittsburgh)  # the same instant written in EDT
    assert status(at) is LateStatus.on_time
    assert status(at + SECOND) is LateStatus.grace
    assert "2026-03-19 23:59:59 EDT" in evaluate(POLICY, at, tz=pittsburgh).reason


@pytest.mark.parametrize("kwargs", [
    {"due_at": datetime(2026, 3, 20)},
    {"release_at": DUE + SECOND, "due_at": DUE},
    {"due_at": DUE, "grace": timedelta(days=2), "late_window": timedelta(days=1)},
    {"due_at": DUE, "grace": -SECOND},
    {"due_at": DUE, "late_window": timedelta(days=1), "penalty_per_day": 1.5},
])
def test_invalid_policies_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        LatePolicy(**kwargs)


def test_naive_submission_time_and_negative_extension_are_refused() -> None:
    with pytest.raises(ValueError):
        evaluate(POLICY, datetime(2026, 3, 10))
    with pytest.raises(ValueError):
        Extension(-SECOND)
