"""Grade reads shared by the pages, the API and the notifications: the staff's adjustments
and the final grade of runs, each assignment's upload window for one user, and which run
counts for a student (the run chosen by staff, or by the student where the assignment allows
it; else the score policy's pick).

Each does a fixed, small number of SQL statements whatever the number of runs."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session

from grader.course.deadlines import Lateness
from grader.course.grades import Adjustment, Deadlines, Grade, final_grade
from grader.course.policies import Refusal, admission, late_checker, lateness
from grader.models import Assignment, CountedRun, GradeAdjustment, Run, RunState, User
from grader.settings import Settings


def grade_adjustments(session: Session, run_ids: Select[Any] | list[int]) -> dict[int, tuple[Adjustment, ...]]:
    """run id -> the staff's adjustments of each of `run_ids` (ids, or a select of them), oldest
    first; one statement."""
    found: dict[int, list[Adjustment]] = defaultdict(list)
    for run_id, points, reason, by, at in session.execute(
        select(GradeAdjustment.run_id, GradeAdjustment.points, GradeAdjustment.reason, User.username,
               GradeAdjustment.created_at)
        .join(User, User.id == GradeAdjustment.by_id)
        .where(GradeAdjustment.run_id.in_(run_ids))
        .order_by(GradeAdjustment.id)
    ):
        found[run_id].append(Adjustment(float(points), reason, by, at))
    return {run_id: tuple(adjustments) for run_id, adjustments in found.items()}


def run_grades(session: Session, runs: list[Run], tz: tzinfo = UTC) -> dict[int, Grade]:
    """run id -> the final grade of each scored run in `runs` (the gradebook's: the late
    policy of its assignment at its submission's upload time, the student's extension
    included, and the staff's adjustments); `tz` is the zone the reasons show instants in. One
    extension read per assignment, one read of the adjustments."""
    checkers: dict[int, Callable[[int, datetime], Lateness]] = {}
    scored = [run for run in runs if run.state is RunState.scored and run.score is not None]
    adjustments = grade_adjustments(session, [run.id for run in scored]) if scored else {}
    grades = {}
    for run in scored:
        sub = run.submission
        if sub.assignment_id not in checkers:
            checkers[sub.assignment_id] = late_checker(session, sub.assignment)
        lateness = checkers[sub.assignment_id](sub.user_id, sub.uploaded_at).in_zone(tz)
        grades[run.id] = final_grade(run.score or 0.0, sub.assignment.total_points, lateness,
                                     adjustments.get(run.id, ()))
    return grades


@dataclass(frozen=True)
class UploadWindow:
    """One assignment as the upload page shows it to one user now: the deadlines, and why an
    upload would be refused (the upload POST's own rule, course_ops.admission); None: open."""

    deadlines: Deadlines
    refusal: Refusal | None


def upload_windows(session: Session, settings: Settings, user: User, assignments: list[Assignment],
                   now: datetime) -> dict[str, UploadWindow]:
    """slug -> the upload window of each of `assignments` for `user` at `now`."""
    return {a.slug: UploadWindow(Deadlines(lateness(session, a, user.id, now, settings)),
                                 admission(session, settings, user, a, now)) for a in assignments}


@dataclass(frozen=True)
class Candidate:
    """A scored run of one student competing to be the one that counts."""

    user_id: int
    submission_id: int
    run_id: int
    grade: Grade
    finished_at: datetime | None

    def key(self, policy: str) -> tuple[float, int, int]:
        """What the score policy maximises: "latest" the newest submission (its newest run),
        "best" the final grade (ties: the newer)."""
        newer = (self.submission_id, self.run_id)
        return (0.0, *newer) if policy == "latest" else (self.grade.final, *newer)


@dataclass(frozen=True)
class Pin:
    """The run chosen to count for one student (a CountedRun row): by staff, or by the student."""

    run_id: int
    by: str
    reason: str | None
    by_student: bool = False

    @property
    def label(self) -> str:
        """Who chose it, as the staff's pages say it."""
        return "chosen by the student" if self.by_student else "chosen by staff"


def counted_pins(session: Session, assignment_id: int, user_id: int | None = None) -> dict[int, Pin]:
    """user id -> the run chosen to count in the assignment (of `user_id` alone, unless None): by
    staff, or by the student while the assignment lets students choose; one statement."""
    query = (select(CountedRun.user_id, CountedRun.run_id, User.username, CountedRun.reason, CountedRun.by_id)
             .join(User, User.id == CountedRun.by_id)
             .join(Assignment, Assignment.id == CountedRun.assignment_id)
             .where(CountedRun.assignment_id == assignment_id,
                    or_(CountedRun.by_id != CountedRun.user_id, Assignment.students_choose_counted_run)))
    if user_id is not None:
        query = query.where(CountedRun.user_id == user_id)
    return {uid: Pin(run_id, by, reason, by_id == uid) for uid, run_id, by, reason, by_id in session.execute(query)}


def counting_run(runs: list[Run], grades: Mapping[int, Grade], policy: str, pin: Pin | None = None) -> int | None:
    """The id of the run among one student's `runs` of one assignment that the gradebook
    counts: the `pin` (counted_pins) while that run is scored, else the pick of `policy` (`grades`:
    run_grades of them); None without a scored run."""
    if pin is not None and pin.run_id in grades:
        return pin.run_id
    scored = [Candidate(r.submission.user_id, r.submission_id, r.id, grades[r.id], r.finished_at)
              for r in runs if r.id in grades]
    return max(scored, key=lambda r: r.key(policy)).run_id if scored else None


@dataclass(frozen=True)
class Counted:
    """Which run counts for one student in one assignment, and the choice behind it."""

    run_id: int | None  # None: no scored run
    pin: Pin | None  # the choice in force (its run is scored); None: the score policy's pick


def counted_for(session: Session, assignment: Assignment, student_id: int, runs: list[Run],
                grades: Mapping[int, Grade]) -> Counted:
    """The run among the student's `runs` of `assignment` that counts (`grades`: run_grades of
    them), with the choice in force; one statement."""
    pin = counted_pins(session, assignment.id, student_id).get(student_id)
    pin = pin if pin is not None and pin.run_id in grades else None
    return Counted(counting_run(runs, grades, assignment.score_policy, pin), pin)
