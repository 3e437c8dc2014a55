"""Which students' grades differ between two gradebooks of one assignment, and why (pure; no
database): a schedule or policy change is shown as these before it is saved
(grader.schedule_changes), so nobody's earned grade is rewritten unseen."""
from __future__ import annotations

from dataclasses import dataclass

from grader.course.deadlines import Lateness, LateStatus, duration_text
from grader.course.grades import points_text
from grader.reads.gradebook_reads import Gradebook, GradebookRow


@dataclass(frozen=True)
class GradeChange:
    """One student whose grade the change alters: their grade before and after (None: none
    counts), and why in words ("late by 1 d 4 h: now past the late window")."""

    login: str
    name: str | None
    before: float | None
    after: float | None
    why: str

    @property
    def before_text(self) -> str:
        return "no grade" if self.before is None else points_text(self.before)

    @property
    def after_text(self) -> str:
        return "no grade" if self.after is None else points_text(self.after)

    @property
    def text(self) -> str:
        """The change on one line, as the command line prints it."""
        who = f"{self.login} ({self.name})" if self.name and self.name != self.login else self.login
        return f"{who}: {self.before_text} -> {self.after_text} ({self.why})"


def grade_changes(before: Gradebook, after: Gradebook) -> list[GradeChange]:
    """Every student whose final grade differs from `before` to `after` (the same assignment
    under two settings), by login; a student in one gradebook only counts as having no grade
    in the other."""
    old = {row.user_id: row for row in before.rows}
    changes = []
    for row in after.rows:
        earlier = old.get(row.user_id)
        was = earlier.total if earlier is not None else None
        if was != row.total:
            changes.append(GradeChange(row.username, row.full_name, was, row.total, _why(earlier, row, after)))
    return changes


def _why(before: GradebookRow | None, after: GradebookRow, book: Gradebook) -> str:
    """What about the student's grade the new settings change: the run that counts, where its
    upload now falls in the schedule, or the ceiling on the staff's entries."""
    old_run = before.graded.run_id if before is not None and before.graded is not None else None
    new_run = after.graded.run_id if after.graded is not None else None
    if old_run != new_run:
        which = f"run {new_run}" if new_run is not None else "no run"
        return f"another run counts now under the {book.policy} policy: {which} instead of run {old_run}"
    old_late = before.grade.lateness if before is not None and before.grade is not None else None
    new_late = after.grade.lateness if after.grade is not None else None
    if new_late is not None and (old_late is None or old_late.multiplier != new_late.multiplier
                                 or old_late.status is not new_late.status):
        return f"{_when(new_late)}: {_now(new_late)}"
    grade = after.grade
    if grade is not None and grade.adjustments:
        ceiling = grade.total_points + grade.extra_credit
        return f"the staff's entries may now take the grade up to {points_text(ceiling)} points"
    return "the settings changed how the grade is computed"


def _when(late: Lateness) -> str:
    """Where the upload fell against the student's due time, extension included."""
    if late.due_at is None:
        return "no due date"
    if late.at > late.due_at:
        return f"late by {duration_text(late.at - late.due_at)}"
    return f"uploaded {duration_text(late.due_at - late.at)} before the due time"


def _now(late: Lateness) -> str:
    """What the new schedule makes of that upload."""
    if late.status is LateStatus.closed:
        return "now past the late window"
    if late.status is LateStatus.not_released:
        return "now before the release"
    if late.status is LateStatus.late:
        return (f"now {late.penalty_days} started day(s) after the grace x {late.policy.penalty_per_day:.0%} = "
                f"{1.0 - late.multiplier:.0%} off")
    if late.status is LateStatus.grace:
        return "now within the grace period: no penalty"
    return "now on time: no penalty"
