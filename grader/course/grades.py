"""The one final grade of a student in an assignment, and an assignment's deadlines as a
student sees them (pure; no database). Every page, export, API body and notice that shows a
grade reads it from here, so a late or adjusted grade is one grade, with its raw score, the
points taken or given and why, wherever it is shown; grader.course.grade_reads and
grader.reads.gradebook_reads feed it from the database.

A run has its own grade (final_grade: its score less the late penalty). The student's grade in
the assignment (student_grade) is the counted run's grade with the staff's entries on it
(grader.course.adjustments): adjustments (points given or taken) and manual grades (the grade
is these points, whatever the run: a zip that could not be graded, an exemption; one may be
taken back). The entries belong to the student's grade, not to a run, so they stay when
another run comes to count."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from grader.course.deadlines import Lateness, LateStatus, duration_text, show_instant

CHARGED = (LateStatus.late, LateStatus.closed, LateStatus.not_released)  # statuses that cost points
NO_RUN = "no_run"  # a grade's status when no run counts (a manual grade alone)
ADJUST, MANUAL = "adjust", "manual"  # the kinds of entry (grade_adjustments.kind)


def points_text(points: float) -> str:
    """Points as every page prints them: at most two decimals, no trailing zeros."""
    return f"{round(points, 2):g}"


def signed_points(points: float) -> str:
    return ("+" if points >= 0 else "") + points_text(points)


@dataclass(frozen=True)
class Adjustment:
    """One staff entry on a student's grade in an assignment, and why: points given (positive)
    or taken (negative); or, `manual`, a manual grade of `points` (None: the manual grade taken
    back, so the run's grade counts again)."""

    points: float | None
    reason: str
    by: str  # the staff member's login
    at: datetime
    manual: bool = False
    run_id: int | None = None  # the run that counted when it was made (None: none did)

    @property
    def what(self) -> str:
        """The entry in words, without its reason: "+5", "manual grade 90"."""
        if not self.manual:
            return signed_points(self.points or 0.0)
        return "manual grade taken back" if self.points is None else f"manual grade {points_text(self.points)}"

    @property
    def text(self) -> str:
        return f"{self.what} ({self.reason})"

    @property
    def kind(self) -> str:
        return MANUAL if self.manual else ADJUST


@dataclass(frozen=True)
class Grade:
    """A run's grade (no entries), or a student's grade in an assignment: the counted run's
    grade, if any, with the staff's entries."""

    raw: float | None  # the counted run's score, before any late penalty; None: no run counts
    final: float  # after the penalty and the entries, to 0.01 points: the grade every page and export shows
    total_points: float
    lateness: Lateness | None  # where the run's upload fell in the student's schedule; None: no run
    adjustments: tuple[Adjustment, ...] = ()  # the staff's entries, oldest first
    extra_credit: float = 0.0  # points the grade may reach above total_points

    @property
    def after_late(self) -> float | None:
        """The raw score less the late penalty, to 0.01 points (before any entry); None: no run."""
        return None if self.raw is None or self.lateness is None else round(self.lateness.adjust(self.raw), 2)

    @property
    def penalty(self) -> float:
        """Points the late policy took off."""
        return 0.0 if self.raw is None or self.after_late is None else round(self.raw - self.after_late, 2)

    @property
    def manual(self) -> Adjustment | None:
        """The manual grade in force (the newest manual entry, unless it took one back)."""
        newest = next((a for a in reversed(self.adjustments) if a.manual), None)
        return newest if newest is not None and newest.points is not None else None

    @property
    def manual_points(self) -> float | None:
        return self.manual.points if self.manual is not None else None

    @property
    def penalty_days(self) -> int:
        return self.lateness.penalty_days if self.lateness is not None else 0

    @property
    def due_at(self) -> datetime | None:
        return self.lateness.due_at if self.lateness is not None else None

    @property
    def added(self) -> tuple[Adjustment, ...]:
        """The entries that give or take points (not the manual grades)."""
        return tuple(a for a in self.adjustments if not a.manual)

    @property
    def adjusted(self) -> float:
        """The adjustments' sum, before the clamping."""
        return round(sum(a.points or 0.0 for a in self.added), 2)

    @property
    def ceiling(self) -> float:
        """The most the grade may reach: the assignment's points and its extra credit."""
        return float(self.total_points) + self.extra_credit

    @property
    def clamped_to(self) -> float | None:
        """Where the clamp held the grade when the adjustments would have taken it past a bound:
        the ceiling (a +2 on a 10/10 run stays 10) or 0; None when they applied in full."""
        base = self.manual_points if self.manual is not None else self.after_late
        if not self.added or base is None:
            return None
        wanted = round(base + self.adjusted, 2)
        return self.ceiling if wanted > self.ceiling else 0.0 if wanted < 0 else None

    @property
    def clamp_words(self) -> str:
        """The clamp in words for a badge ("capped at 10", "floored at 0"); "" when none."""
        if self.clamped_to is None:
            return ""
        return f"{'capped' if self.clamped_to else 'floored'} at {points_text(self.clamped_to)}"

    @property
    def late(self) -> bool:
        """Whether the late policy charged the upload (the late badge): after the due time and
        its grace, or outside the window (only staff uploads are taken then). Not with a manual
        grade: it is not charged."""
        return self.lateness is not None and self.manual is None and self.lateness.status in CHARGED

    @property
    def status(self) -> str:
        """The upload's place in the schedule: on_time, grace, late (and, for staff uploads,
        which are always taken, not_released or closed); no_run without a run."""
        return NO_RUN if self.lateness is None else self.lateness.status.value

    @property
    def adjustment_text(self) -> str:
        """The staff's adjustments in words ("" without any), as one sentence."""
        if not self.added:
            return ""
        clamp = f" ({self._clamp_reason})" if self.clamped_to is not None else ""
        return (f"Adjusted by staff: {'; '.join(a.text for a in self.added)}, "
                f"so {points_text(self.final)} of {points_text(self.total_points)} points{clamp}.")

    @property
    def _clamp_reason(self) -> str:
        if self.clamped_to:
            extra = f" with {points_text(self.extra_credit)} of extra credit" if self.extra_credit else ""
            return f"{self.clamp_words}: the most the assignment allows{extra}"
        return f"{self.clamp_words}: a grade is never below 0"

    @property
    def reason(self) -> str:
        """The grade in words: where the upload fell (or the manual grade), then any adjustment
        (a sentence each)."""
        manual, total = self.manual, points_text(self.total_points)
        if manual is not None:
            first = (f"Manual grade by {manual.by}: {points_text(manual.points or 0.0)} of {total} points "
                     f"({manual.reason}).")
        elif self.lateness is None:
            first = "No run counts."
        else:
            first = self._late_words()
        return f"{first} {self.adjustment_text}" if self.added else first

    def _late_words(self) -> str:
        assert self.lateness is not None and self.raw is not None
        status, words = self.lateness.status, self.lateness.reason
        if status is LateStatus.not_released:
            words = f"before the release ({words})"
        if status in CHARGED:
            return (f"Uploaded {words}: {points_text(self.raw)} - {points_text(self.penalty)} = "
                    f"{points_text(self.after_late or 0.0)} of {points_text(self.total_points)} points.")
        if status is LateStatus.grace:
            return f"Uploaded {words}."
        return words[:1].upper() + words[1:] + "."


def final_grade(raw_score: float, total_points: float, lateness: Lateness) -> Grade:
    """The grade of a scored run whose submission's upload time has `lateness`: the late policy
    takes its share of the raw score (a score alone is the rubric's, within its points)."""
    return Grade(raw=float(raw_score), final=round(lateness.adjust(float(raw_score)), 2), total_points=total_points,
                 lateness=lateness)


def student_grade(run: Grade | None, entries: tuple[Adjustment, ...], total_points: float,
                  extra_credit: float = 0.0) -> Grade | None:
    """A student's grade in an assignment: the counted run's grade `run` (final_grade; None: no
    scored run counts) with the staff's `entries` on the student's grade, oldest first. None
    when there is neither a run nor a manual grade.

    A manual grade in force replaces the run's grade (not charged for lateness); the
    adjustments are then added in full (a staff's judgement is not itself charged for
    lateness: +5 stays +5 on a late run). With any entry the sum is clamped to [0, total
    points + extra credit], so an entry can neither make a grade negative nor give more than
    the assignment is worth and the extra credit it allows; the entries stay as given (and
    shown)."""
    grade = Grade(raw=run.raw if run else None, final=run.final if run else 0.0, total_points=total_points,
                  lateness=run.lateness if run else None, adjustments=tuple(entries), extra_credit=extra_credit)
    base = grade.manual.points if grade.manual is not None else run.final if run is not None else None
    if base is None:
        return None
    if entries:
        base = min(max(base + grade.adjusted, 0.0), float(total_points) + extra_credit)
    return Grade(raw=grade.raw, final=round(base, 2), total_points=total_points, lateness=grade.lateness,
                 adjustments=grade.adjustments, extra_credit=extra_credit)


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
