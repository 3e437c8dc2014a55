"""The one final grade of a run, and an assignment's deadlines as a student sees them (pure;
no database). Every page, export, API body and notice that shows a grade reads it from
`final_grade`, so a late run has one grade, its raw score, the points taken and why, wherever
it is shown; grader.queries.run_grades and .gradebook feed it from the database."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from grader.deadlines import Lateness, LateStatus, duration_text, show_instant

CHARGED = (LateStatus.late, LateStatus.closed, LateStatus.not_released)  # statuses that cost points


def points_text(points: float) -> str:
    """Points as every page prints them: at most two decimals, no trailing zeros."""
    return f"{round(points, 2):g}"


@dataclass(frozen=True)
class Grade:
    raw: float  # the run's score, before any late penalty
    final: float  # after the penalty, to 0.01 points: the grade every page and export shows
    total_points: float
    lateness: Lateness  # where the upload fell in the student's schedule (extension included)

    @property
    def penalty(self) -> float:
        """Points the late policy took off."""
        return round(self.raw - self.final, 2)

    @property
    def late(self) -> bool:
        """Whether the late policy charged the upload (the late badge): after the due time and
        its grace, or outside the window (only staff uploads are taken then)."""
        return self.lateness.status in CHARGED

    @property
    def status(self) -> str:
        """The upload's place in the schedule: on_time, grace, late (and, for staff uploads,
        which are always taken, not_released or closed)."""
        return self.lateness.status.value

    @property
    def reason(self) -> str:
        """The grade in words, as one sentence."""
        status, words = self.lateness.status, self.lateness.reason
        if status is LateStatus.not_released:
            words = f"before the release ({words})"
        if status in CHARGED:
            return (f"Uploaded {words}: {points_text(self.raw)} - {points_text(self.penalty)} = "
                    f"{points_text(self.final)} of {points_text(self.total_points)} points.")
        if status is LateStatus.grace:
            return f"Uploaded {words}."
        return words[:1].upper() + words[1:] + "."


def final_grade(raw_score: float, total_points: float, lateness: Lateness) -> Grade:
    """The grade of a scored run whose submission's upload time has `lateness`."""
    return Grade(raw=float(raw_score), final=round(lateness.adjust(float(raw_score)), 2),
                 total_points=total_points, lateness=lateness)


@dataclass(frozen=True)
class Deadlines:
    """One student's deadlines on one assignment, shown on the upload page; instants are in
    the zone of the lateness they come from."""

    lateness: Lateness  # of an upload now

    @property
    def due_at(self) -> datetime | None:
        return self.lateness.due_at

    def _bound(self, after: timedelta) -> datetime | None:
        return None if self.due_at is None else self.due_at + after

    @property
    def grace_ends(self) -> datetime | None:
        return self._bound(self.lateness.policy.grace) if self.lateness.policy.grace else None

    @property
    def late_window_ends(self) -> datetime | None:
        policy = self.lateness.policy
        return self._bound(policy.late_window) if policy.late_window > policy.grace else None

    def shown(self, instant: datetime | None) -> str:
        return "" if instant is None else show_instant(instant, self.lateness.tz)

    @property
    def extended_by(self) -> str | None:
        """The student's extension, in words; None without one."""
        ext = self.lateness.extension
        return duration_text(ext.extra) if ext is not None and ext.extra else None

    @property
    def time_left(self) -> str | None:
        """Time to the next bound that changes the grade, in words; None with no due date or
        once the late window has closed."""
        now, status = self.lateness.at, self.lateness.status
        bounds = [(self.due_at, "until the due time")]
        if status in (LateStatus.grace, LateStatus.late, LateStatus.closed):
            bounds = [(self.grace_ends, "of the grace period"), (self.late_window_ends, "until the late window closes")]
        for bound, what in bounds:
            if bound is not None and bound >= now:
                return f"{duration_text(bound - now)} {what}"
        return None

    @property
    def penalty_per_day(self) -> float:
        return self.lateness.policy.penalty_per_day

    @property
    def penalty_now(self) -> float | None:
        """The share an upload now would lose, when it would be late; None otherwise."""
        return round(1.0 - self.lateness.multiplier, 9) if self.lateness.status is LateStatus.late else None
