"""Graded-run quota: at most `limit` runs per student and assignment in any rolling window (pure;
no database). The limit is the assignment's own, else its course's, else the service's
KG_QUOTA_RUNS (grader.course.policies.run_limit); the window is the service's.

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

    @property
    def words(self) -> str | None:
        """`N of M runs left`, for the upload page; None when no quota applies."""
        if not self.limit:
            return None
        left = max(0, self.limit - self.used)
        return f"{left} of {self.limit} run{'' if self.limit == 1 else 's'} left"

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
                             f"run {used + 1} of {policy.limit} in the last {hours(policy.window)}")
    frees_at = counted[used - policy.limit] + policy.window
    return QuotaDecision(False, used, policy.limit, frees_at,
                         f"quota reached: {policy.limit} graded runs of this assignment in {hours(policy.window)}; "
                         f"the next one is possible at {frees_at.strftime('%Y-%m-%d %H:%M:%S %Z')}")


def parse_runs(text: str) -> int | None:
    """A run quota as a settings form takes it: a whole number of runs (0: no quota), or "" for
    the default above it (None); ValueError saying what to type otherwise."""
    if not text:
        return None
    if not (text.isascii() and text.isdigit() and int(text) <= 100_000):
        raise ValueError(f"“{text}” is not a number of runs: give a whole number such as 10, 0 for no quota, or "
                         "leave it empty for the default.")
    return int(text)


def hours(window: timedelta) -> str:
    hours = window.total_seconds() / 3600
    return f"{hours:g} h"
