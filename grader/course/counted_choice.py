"""Choosing which run counts for a student in an assignment, instead of the score policy's pick
(a counted_runs row; grader.course.grade_reads reads it): staff choose any scored run of a student (the
staff history page); the student chooses one of their own scored runs (their history page) only
where the assignment lets students choose (`students_choose_counted_run`, off by default) and
staff have not chosen one. A student's choice counts only while the assignment allows it."""
from __future__ import annotations

from enum import StrEnum

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from grader.models import Assignment, CountedRun, Run, RunState, User


class StudentRefusal(StrEnum):
    """Why a student's choice is refused; the history page says each in fixed words."""

    not_allowed = "not_allowed"
    staff_chose = "staff_chose"
    unscored = "unscored"


REFUSAL_TEXT = {
    StudentRefusal.not_allowed: "The staff of {slug} have not let students choose which run counts: "
                                "the score policy picks it.",
    StudentRefusal.staff_chose: "Staff chose which of your runs counts in {slug}; ask them if it should change.",
    StudentRefusal.unscored: "Only one of your scored runs of {slug} can be chosen to count.",
}


def is_scored(run: Run) -> bool:
    return run.state is RunState.scored and run.score is not None


def choose(session: Session, assignment: Assignment, student_id: int, run: Run, by: User,
           reason: str | None = None) -> None:
    """Count `run` (a scored run of `student_id` in `assignment`) for the student, replacing any
    earlier choice; `by` is the staff member, or the student themselves."""
    clear(session, assignment, student_id)
    session.add(CountedRun(assignment_id=assignment.id, user_id=student_id, run_id=run.id, reason=reason,
                           by_id=by.id))
    session.flush()


def clear(session: Session, assignment: Assignment, student_id: int) -> None:
    """Back to the score policy's pick for the student."""
    session.execute(delete(CountedRun).where(CountedRun.assignment_id == assignment.id,
                                             CountedRun.user_id == student_id))


def _staff_chose(session: Session, assignment: Assignment, student: User) -> bool:
    by = session.scalar(select(CountedRun.by_id).where(CountedRun.assignment_id == assignment.id,
                                                       CountedRun.user_id == student.id))
    return by is not None and by != student.id


def student_refusal(session: Session, assignment: Assignment, student: User,
                    run: Run | None = None) -> StudentRefusal | None:
    """Why `student` may not choose `run` (one of their own runs of `assignment`; None: may not
    go back to the policy's pick) to count now; None when they may."""
    if not assignment.students_choose_counted_run:
        return StudentRefusal.not_allowed
    if _staff_chose(session, assignment, student):
        return StudentRefusal.staff_chose
    if run is not None and not is_scored(run):
        return StudentRefusal.unscored
    return None
