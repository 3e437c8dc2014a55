"""Graded-run quota: at most `limit` runs per student in any rolling window (pure; no database).

A run started at t counts against the window (now - window, now]: it stops counting exactly
`window` after it was created, which is when its place frees up. Staff are exempt, and
`limit` 0 turns the quota off. The caller passes the creation times of the student's runs
that count (see grader.course.policies.counted_run_times for which ones do).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class QuotaPolicy:
    limit: int  # runs per window; 0: no quota
    window: timedelta

    def __post_init__(self) -> None:
        if self.limit < 0:
            raise ValueError("the quota limit cannot be negative")
        if self.window <= timedelta(0):
            raise ValueError("the quota window must be positive")


@dataclass(frozen=True)
class QuotaDecision:
    allowed: bool
    used: int  # runs counted in the current window
    limit: int  # 0: no quota applies
    frees_at: datetime | None  # refused: when the oldest counted run leaves the window
    reason: str

    def retry_after_s(self, now: datetime) -> int | None:
        """Whole seconds until an upload would be accepted (for a Retry-After header)."""
        if self.frees_at is None:
            return None
        return max(1, int((self.frees_at - now).total_seconds() + 0.999))


def check(policy: QuotaPolicy, run_times: Iterable[datetime], now: datetime, exempt: bool = False) -> QuotaDecision:
    """Whether one more run may start at `now` for a student whose earlier counted runs were
    created at `run_times` (any order; times after `now` count too)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if exempt or policy.limit == 0:
        return QuotaDecision(True, 0, 0, None, "staff are exempt from the quota" if exempt else "no quota")
    counted = sorted(t for t in run_times if t > now - policy.window)
    used = len(counted)
    if used < policy.limit:
        return QuotaDecision(True, used, policy.limit, None,
                             f"run {used + 1} of {policy.limit} in the last {_hours(policy.window)}")
    frees_at = counted[used - policy.limit] + policy.window
    return QuotaDecision(False, used, policy.limit, frees_at,
                         f"quota reached: {policy.limit} graded runs in {_hours(policy.window)}; "
                         f"the next one is possible at {frees_at.strftime('%Y-%m-%d %H:%M:%S %Z')}")


def _hours(window: timedelta) -> str:
    hours = window.total_seconds() / 3600
    return f"{hours:g} h"
