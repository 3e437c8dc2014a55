"""Late policy of an assignment: when a submission counts, and for how much (pure; no database).

The timeline of one student, every bound inclusive on its left-hand window:

    release_at ........ due_at (+ extension) ... grace end ......... late window end
      |  not_released  |        on_time         |   grace   |   late   |   closed
    (before release)   (release <= t <= due)   (due < t <= due + grace) (... <= due + late_days)

- `not_released`: before `release_at`; the upload is refused.
- `on_time`: up to and including the (possibly extended) due instant; full credit.
- `grace`: after the due instant up to and including `grace` after it; full credit.
- `late`: after the grace up to and including `late_days` after the due instant; every started
  24-hour day after the end of the grace costs `penalty_per_day` of the score (fractional days
  round up: one second into a day counts that whole day), never below zero.
- `closed`: after the late window; the upload is refused and would earn nothing.

An extension moves the due instant, and with it the grace and the late window; the release
stays. All instants are timezone-aware and compared in UTC; naive datetimes are refused.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo

DAY = timedelta(days=1)


class LateStatus(str, enum.Enum):
    not_released = "not_released"
    on_time = "on_time"
    grace = "grace"
    late = "late"
    closed = "closed"


def _aware(name: str, value: datetime | None) -> None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"{name} must be timezone-aware (UTC is stored)")


@dataclass(frozen=True)
class LatePolicy:
    """One assignment's schedule. `due_at` None: no deadline (everything after release is on
    time). `late_window` counts from the due instant and includes the grace."""

    release_at: datetime | None = None
    due_at: datetime | None = None
    grace: timedelta = timedelta(0)
    late_window: timedelta = timedelta(0)
    penalty_per_day: float = 0.0

    def __post_init__(self) -> None:
        _aware("release_at", self.release_at)
        _aware("due_at", self.due_at)
        if self.grace < timedelta(0):
            raise ValueError("grace must not be negative")
        if self.late_window < self.grace:
            raise ValueError("the late window includes the grace and cannot be shorter than it")
        if not 0.0 <= self.penalty_per_day <= 1.0:
            raise ValueError("penalty_per_day is a fraction of the score between 0 and 1")
        if self.release_at is not None and self.due_at is not None and self.release_at > self.due_at:
            raise ValueError("release_at is after due_at")


@dataclass(frozen=True)
class Extension:
    """Extra time for one student on one assignment (moves their due instant)."""

    extra: timedelta
    reason: str = ""

    def __post_init__(self) -> None:
        if self.extra < timedelta(0):
            raise ValueError("an extension cannot be negative")


def show_instant(instant: datetime, tz: tzinfo) -> str:
    return instant.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z")


def duration_text(delta: timedelta) -> str:
    """`2 d 3 h`, `15 min`, `1 s`: the non-zero units of days, hours, minutes, seconds."""
    seconds = int(delta.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts) or "0 s"


@dataclass(frozen=True)
class Lateness:
    """Where one instant falls in one student's schedule. The reason is worded when read, in
    `tz`, so every page can show the same lateness in the course's zone (`in_zone`)."""

    status: LateStatus
    multiplier: float  # the share of the score the submission keeps
    penalty_days: int  # started days past the grace that were charged
    due_at: datetime | None  # the student's effective due instant (extension included)
    at: datetime  # the instant judged (an upload time)
    policy: LatePolicy
    extension: Extension | None = None
    tz: tzinfo = UTC

    @property
    def accepted(self) -> bool:
        """Whether an upload at this instant should be taken at all."""
        return self.status not in (LateStatus.not_released, LateStatus.closed)

    def adjust(self, points: float) -> float:
        return points * self.multiplier

    def in_zone(self, tz: tzinfo) -> Lateness:
        return replace(self, tz=tz)

    def refusal(self, what: str) -> str | None:
        """Why an upload to `what` (an assignment) at this instant is refused, as a sentence
        a student can act on; None when it is taken."""
        policy, due = self.policy, self.due_at
        if self.status is LateStatus.not_released:
            assert policy.release_at is not None
            return f"Uploads to {what} open at {show_instant(policy.release_at, self.tz)}; it takes none before."
        if self.status is LateStatus.closed:
            assert due is not None
            extra = self.extension.extra if self.extension is not None else timedelta(0)
            extended = f" (your extension of {duration_text(extra)} included)" if extra else ""
            return (f"Uploads to {what} closed at {show_instant(due + policy.late_window, self.tz)}{extended}, "
                    "when its late window ended; it takes no more.")
        return None

    @property
    def reason(self) -> str:
        policy, tz, due = self.policy, self.tz, self.due_at
        if self.status is LateStatus.not_released:
            assert policy.release_at is not None
            return f"the assignment opens at {show_instant(policy.release_at, tz)}"
        if due is None:
            return "no due date"
        extra = self.extension.extra if self.extension is not None else timedelta(0)
        extended = f" (extended by {duration_text(extra)})" if extra else ""
        if self.status is LateStatus.on_time:
            return f"on time: due {show_instant(due, tz)}{extended}"
        if self.status is LateStatus.closed:
            return f"after the late window closed at {show_instant(due + policy.late_window, tz)}{extended}"
        over = f"{duration_text(self.at - due)} after the due time {show_instant(due, tz)}{extended}"
        if self.status is LateStatus.grace:
            return f"{over}, within the {duration_text(policy.grace)} grace period: no penalty"
        return (f"{over}: {self.penalty_days} started day(s) after the grace x {policy.penalty_per_day:.0%} = "
                f"{1.0 - self.multiplier:.0%} off")


def evaluate(policy: LatePolicy, submitted_at: datetime, extension: Extension | None = None,
             tz: tzinfo = UTC) -> Lateness:
    """Where `submitted_at` falls in `policy` for a student with `extension`; `tz` is only the
    zone the reason shows instants in."""
    _aware("submitted_at", submitted_at)

    def judged(status: LateStatus, multiplier: float, days: int, due: datetime | None) -> Lateness:
        return Lateness(status, multiplier, days, due, submitted_at, policy, extension, tz)

    if policy.release_at is not None and submitted_at < policy.release_at:
        return judged(LateStatus.not_released, 0.0, 0, policy.due_at)
    if policy.due_at is None:
        return judged(LateStatus.on_time, 1.0, 0, None)
    due = policy.due_at + (extension.extra if extension is not None else timedelta(0))
    if submitted_at <= due:
        return judged(LateStatus.on_time, 1.0, 0, due)
    over = submitted_at - due
    if over <= policy.grace:
        return judged(LateStatus.grace, 1.0, 0, due)
    if over > policy.late_window:
        return judged(LateStatus.closed, 0.0, 0, due)
    days = math.ceil((over - policy.grace) / DAY)
    multiplier = round(max(0.0, 1.0 - days * policy.penalty_per_day), 9)
    return judged(LateStatus.late, multiplier, days, due)
