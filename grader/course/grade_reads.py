"""Grade reads shared by the pages, the API and the notifications: the grade of runs, the
staff's entries on students' grades, each assignment's upload window for one user, and which
run counts for a student (the run chosen by staff, or by the student where the assignment
allows it; else the score policy's pick) with the student's grade (grader.course.grades).

Each does a fixed, small number of SQL statements whatever the number of runs."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, selectinload

from grader.course.deadlines import Lateness
from grader.course.grades import MANUAL, Adjustment, Deadlines, Grade, final_grade, student_grade
from grader.course.membership import role_in
from grader.course.policies import Refusal, admission, late_checker, lateness, quota_decision, storage_use
from grader.course.quotas import hours
from grader.course.storage import StorageUse
from grader.models import Assignment, CountedRun, GradeAdjustment, Run, RunState, Submission, User
from grader.settings import Settings


def grade_entries(session: Session, assignment_id: int,
                  user_ids: list[int] | None = None) -> dict[int, tuple[Adjustment, ...]]:
    """student id -> the staff's entries on their grade in the assignment (of `user_ids` alone,
    unless None), oldest first, without those set aside; one statement."""
    found: dict[int, list[Adjustment]] = defaultdict(list)
    query = (select(GradeAdjustment.user_id, GradeAdjustment.points, GradeAdjustment.reason, User.username,
                    GradeAdjustment.created_at, GradeAdjustment.kind, GradeAdjustment.run_id)
             .join(User, User.id == GradeAdjustment.by_id)
             .where(GradeAdjustment.assignment_id == assignment_id, GradeAdjustment.set_aside.is_(None))
             .order_by(GradeAdjustment.id))
    if user_ids is not None:
        query = query.where(GradeAdjustment.user_id.in_(user_ids))
    for user_id, points, reason, by, at, kind, run_id in session.execute(query):
        found[user_id].append(Adjustment(None if points is None else float(points), reason, by, at,
                                         manual=kind == MANUAL, run_id=run_id))
    return {user_id: tuple(entries) for user_id, entries in found.items()}


def set_aside_entries(session: Session, assignment_id: int, user_id: int) -> list[tuple[Adjustment, str]]:
    """The student's entries in the assignment that count nowhere, each with why (migration
    0020 set aside the adjustments of runs that did not count), oldest first; one statement."""
    return [(Adjustment(points, reason, by, at, run_id=run_id), why or "") for points, reason, by, at, run_id, why in
            session.execute(select(GradeAdjustment.points, GradeAdjustment.reason, User.username,
                                   GradeAdjustment.created_at, GradeAdjustment.run_id, GradeAdjustment.set_aside)
                            .join(User, User.id == GradeAdjustment.by_id)
                            .where(GradeAdjustment.assignment_id == assignment_id, GradeAdjustment.user_id == user_id,
                                   GradeAdjustment.set_aside.is_not(None))
                            .order_by(GradeAdjustment.id))]


def run_grades(session: Session, runs: list[Run], tz: tzinfo = UTC) -> dict[int, Grade]:
    """run id -> the grade of each scored run in `runs` on its own (the late policy of its
    assignment at its submission's upload time, the student's extension included; the staff's
    entries are the student's grade's, Counted.grade); `tz` is the zone the reasons show
    instants in. One extension read per assignment."""
    checkers: dict[int, Callable[[int, datetime], Lateness]] = {}
    grades = {}
    for run in runs:
        if run.state is not RunState.scored or run.score is None:
            continue
        sub = run.submission
        if sub.assignment_id not in checkers:
            checkers[sub.assignment_id] = late_checker(session, sub.assignment)
        lateness = checkers[sub.assignment_id](sub.user_id, sub.uploaded_at).in_zone(tz)
        grades[run.id] = final_grade(run.score, sub.assignment.total_points, lateness)
    return grades


@dataclass(frozen=True)
class UploadWindow:
    """One assignment as the upload page shows it to one user now: the deadlines, and why an
    upload would be refused (the upload POST's own rule, course_ops.admission); None: open."""

    deadlines: Deadlines
    refusal: Refusal | None
    storage: StorageUse | None  # what the student keeps there against their quota; None: staff
    runs_left: str | None = None  # `N of M runs left` in the run quota's window; None: staff, or no quota


def upload_windows(session: Session, settings: Settings, user: User, assignments: list[Assignment],
                   now: datetime) -> dict[str, UploadWindow]:
    """slug -> the upload window of each of `assignments` for `user` at `now`."""
    return {a.slug: _upload_window(session, settings, user, a, now) for a in assignments}


def _upload_window(session: Session, settings: Settings, user: User, assignment: Assignment,
                   now: datetime) -> UploadWindow:
    deadlines = Deadlines(lateness(session, assignment, user.id, now, settings))
    refusal = admission(session, settings, user, assignment, now)
    if _is_staff(session, user, assignment):
        return UploadWindow(deadlines, refusal, None)
    left = quota_decision(session, settings, user, assignment, now).words
    return UploadWindow(deadlines, refusal, storage_use(session, settings, user.id, assignment),
                        f"{left} (a run counts for {hours(timedelta(seconds=settings.quota_window_s))})" if left else None)


def _is_staff(session: Session, user: User, assignment: Assignment) -> bool:
    role = role_in(session, user.id, assignment.id)
    return role is not None and role.is_staff


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
        "best" the run's own grade, after any late penalty (ties: the newer); the staff's entries
        are the student's, the same whichever run counts."""
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
    """Which run counts for one student in one assignment, the choice behind it, and the
    student's grade there."""

    run_id: int | None  # None: no scored run
    pin: Pin | None  # the choice in force (its run is scored); None: the score policy's pick
    grade: Grade | None = None  # the counted run's grade with the staff's entries; None: no grade at all


def counted_for(session: Session, assignment: Assignment, student_id: int, runs: list[Run],
                grades: Mapping[int, Grade]) -> Counted:
    """The run among the student's `runs` of `assignment` that counts (`grades`: run_grades of
    them), with the choice in force and the student's grade; two statements."""
    pin = counted_pins(session, assignment.id, student_id).get(student_id)
    pin = pin if pin is not None and pin.run_id in grades else None
    run_id = counting_run(runs, grades, assignment.score_policy, pin)
    entries = grade_entries(session, assignment.id, [student_id]).get(student_id, ())
    grade = student_grade(grades[run_id] if run_id is not None else None, entries, assignment.total_points,
                          assignment.extra_credit_points)
    return Counted(run_id, pin, grade)


def counted_of(session: Session, assignment: Assignment, student_id: int, tz: tzinfo = UTC) -> Counted:
    """counted_for over every run of the student in `assignment`, read here (four statements)."""
    runs = list(session.scalars(select(Run).join(Submission).options(selectinload(Run.submission))
                                .where(Submission.user_id == student_id, Submission.assignment_id == assignment.id)))
    return counted_for(session, assignment, student_id, runs, run_grades(session, runs, tz))
