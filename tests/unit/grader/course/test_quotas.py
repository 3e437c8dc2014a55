"""grader.course.quotas: the N-th run allowed, the N+1-th refused with the instant it frees up."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from grader.course.quotas import QuotaPolicy, check

NOW = datetime(2026, 3, 19, 23, 0, tzinfo=UTC)
POLICY = QuotaPolicy(limit=3, window=timedelta(hours=6))


def ago(**kw: float) -> datetime:
    return NOW - timedelta(**kw)


def test_the_nth_run_is_allowed() -> None:
    decision = check(POLICY, [ago(hours=5), ago(hours=1)], NOW)
    assert decision.allowed and decision.used == 2 and decision.frees_at is None
    assert "run 3 of 3" in decision.reason


def test_the_n_plus_first_is_refused_until_the_oldest_leaves_the_window() -> None:
    oldest = ago(hours=5)
    decision = check(POLICY, [ago(minutes=10), oldest, ago(hours=2)], NOW)
    assert not decision.allowed and decision.used == 3
    assert decision.frees_at == oldest + timedelta(hours=6) == NOW + timedelta(hours=1)
    assert decision.retry_after_s(NOW) == 3600
    assert "2026-03-20 00:00:00 UTC" in decision.reason


def test_allowed_exactly_when_the_place_frees_up_and_not_a_second_before() -> None:
    runs = [ago(hours=5), ago(hours=2), ago(minutes=10)]
    frees_at = check(POLICY, runs, NOW).frees_at
    assert frees_at is not None
    assert not check(POLICY, runs, frees_at - timedelta(seconds=1)).allowed
    assert check(POLICY, runs, frees_at).allowed


def test_a_run_exactly_one_window_old_no_longer_counts() -> None:
    decision = check(POLICY, [ago(hours=6), ago(hours=1), ago(minutes=1)], NOW)
    assert decision.allowed and decision.used == 2


def test_far_over_quota_waits_for_enough_runs_to_leave() -> None:
    runs = [ago(hours=h) for h in (5, 4, 3, 2, 1)]  # 5 counted (e.g. counted before a lower limit)
    decision = check(POLICY, runs, NOW)
    assert decision.frees_at == ago(hours=3) + timedelta(hours=6)  # 3 must leave for 2 < 3 to remain
    assert check(POLICY, runs, decision.frees_at).allowed


def test_staff_are_exempt_and_zero_turns_the_quota_off() -> None:
    runs = [ago(minutes=m) for m in range(10)]
    assert check(POLICY, runs, NOW, exempt=True).allowed
    assert check(QuotaPolicy(limit=0, window=timedelta(hours=1)), runs, NOW).allowed


@pytest.mark.parametrize("limit,window", [(-1, timedelta(hours=1)), (3, timedelta(0))])
def test_invalid_policy(limit: int, window: timedelta) -> None:
    with pytest.raises(ValueError):
        QuotaPolicy(limit, window)


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError):
        check(POLICY, [], datetime(2026, 3, 19))
