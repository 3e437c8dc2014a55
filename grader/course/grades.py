"""The one final grade of a run, and an assignment's deadlines as a student sees them (pure;
no database). Every page, export, API body and notice that shows a grade reads it from
`final_grade`, so a late or adjusted run has one grade, its raw score, the points taken or
given and why, wherever it is shown; grader.reads.grade_reads.run_grades and
grader.reads.gradebook_reads.gradebook feed it from the database (the staff's adjustments too:
grader.course.adjustments)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from grader.course.deadlines import Lateness, LateStatus, duration_text, show_instant

CHARGED = (LateStatus.late, LateStatus.closed, LateStatus.not_released)  # statuses that cost points


def points_text(points: float) -> str:
    """Points as every page prints them: at most two decimals, no trailing zeros."""
    return f"{round(points, 2):g}"


def signed_points(points: float) -> str:
    return ("+" if points >= 0 else "") + points_text(points)


@dataclass(frozen=True)
class Adjustment:
    """Points staff gave (positive) or took (negative) on a run, and why."""

    points: float
    reason: str
    by: str  # the staff member's login
    at: datetime

    @property
    def text(self) -> str:
        return f"{signed_points(self.points)} ({self.reason})"


@dataclass(frozen=True)
class Grade:
    raw: float  # the run's score, before any late penalty
    final: float  # after the penalty and the adjustments, to 0.01 points: the grade every page and export shows
    total_points: float
    lateness: Lateness  # where the upload fell in the student's schedule (extension included)
    adjustments: tuple[Adjustment, ...] = ()  # oldest first

    @property
    def after_late(self) -> float:
        """The raw score less the late penalty, to 0.01 points (before any adjustment)."""
        return round(self.lateness.adjust(self.raw), 2)

    @property
    def penalty(self) -> float:
        """Points the late policy took off."""
        return round(self.raw - self.after_late, 2)

    @property
    def adjusted(self) -> float:
        """The adjustments' sum, before the clamping to [0, total]."""
        return round(sum(a.points for a in self.adjustments), 2)

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
    def adjustment_text(self) -> str:
        """The staff's adjustments in words ("" without any), as one sentence."""
        if not self.adjustments:
            return ""
        return (f"Adjusted by staff: {'; '.join(a.text for a in self.adjustments)}, "
                f"so {points_text(self.final)} of {points_text(self.total_points)} points.")

    @property
    def reason(self) -> str:
        """The grade in words: where the upload fell, then any adjustment (a sentence each)."""
        status, words = self.lateness.status, self.lateness.reason
        if status is LateStatus.not_released:
            words = f"before the release ({words})"
        if status in CHARGED:
            late = (f"Uploaded {words}: {points_text(self.raw)} - {points_text(self.penalty)} = "
                    f"{points_text(self.after_late)} of {points_text(self.total_points)} points.")
        elif status is LateStatus.grace:
            late = f"Uploaded {words}."
        else:
            late = words[:1].upper() + words[1:] + "."
        return f"{late} {self.adjustment_text}" if self.adjustments else late


def final_grade(raw_score: float, total_points: float, lateness: Lateness,
                adjustments: tuple[Adjustment, ...] = ()) -> Grade:
    """The grade of a scored run whose submission's upload time has `lateness`, with the
    staff's `adjustments` of it.

    Order: the late policy takes its share of the raw score first, then the adjustments are
    added in full (a staff's judgement is not itself charged for lateness: +5 stays +5 on a
    late run). The sum is then clamped to [0, total points], so an adjustment can neither make
    a grade negative nor give more than the assignment is worth; only the final is clamped, the
    adjustments stay as given (and shown)."""
    final = round(lateness.adjust(float(raw_score)), 2)
    if adjustments:  # only an adjusted grade is clamped: a score alone is the rubric's, within its points
        final = min(max(final + sum(a.points for a in adjustments), 0.0), float(total_points))
    return Grade(raw=float(raw_score), final=round(final, 2), total_points=total_points, lateness=lateness,
                 adjustments=tuple(adjustments))


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
    def next_bound(self) -> tuple[int, str] | None:
        """Whole seconds to the next bound that changes the grade, and what it is ("until the due
        time"); None with no due date or once the late window has closed. The upload page's
        countdown (static/countdown.js) starts from these seconds: the server's clock is the truth."""
        now, status = self.lateness.at, self.lateness.status
        bounds = [(self.due_at, "until the due time")]
        if status in (LateStatus.grace, LateStatus.late, LateStatus.closed):
            bounds = [(self.grace_ends, "of the grace period"), (self.late_window_ends, "until the late window closes")]
        for bound, what in bounds:
            if bound is not None and bound >= now:
                return int((bound - now).total_seconds()), what
        return None

    @property
    def time_left(self) -> str | None:
        """`next_bound` in words: "1 d 3 h until the due time"."""
        bound = self.next_bound
        return None if bound is None else f"{duration_text(timedelta(seconds=bound[0]))} {bound[1]}"

    @property
    def penalty_per_day(self) -> float:
        return self.lateness.policy.penalty_per_day

    @property
    def penalty_now(self) -> float | None:
        """The share an upload now would lose, when it would be late; None otherwise."""
        return round(1.0 - self.lateness.multiplier, 9) if self.lateness.status is LateStatus.late else None
