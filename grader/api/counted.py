"""/api/v1 one student in an assignment: the run that counts (grader.course.counted_choice) and
the student's grade with the staff's entries on it (grader.course.adjustments), under the
pages' rules: staff of the assignment choose any scored run of a student (scope `regrade`); a
student chooses one of their own (scope `submit`) only where the assignment lets students
choose and staff have not, refused with 403 and the pages' words otherwise; only staff make an
entry on a grade (scope `regrade`), one the workflow refuses is 409 with why. Another student's
choice or grade reads as absent (404); a run that is not a scored run of that student is 409."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, BackgroundTasks, HTTPException, status
from pydantic import BaseModel, Field, StringConstraints
from sqlalchemy.orm import Session

from grader.api.deps import DB, Caller, Context, member_assignment, refuse_unless, require
from grader.api.errors import ERRORS, ApiError, ErrorBody
from grader.api.schemas import GradeOut, RequestBody
from grader.auth.credentials import SCOPE_READ, SCOPE_REGRADE, SCOPE_SUBMIT, Principal
from grader.course import adjustments
from grader.course.adjustments import MAX_TEXT, WorkflowError
from grader.course.counted_choice import REFUSAL_TEXT, choose, clear, is_scored, student_refusal
from grader.course.grade_reads import Counted, counted_for, run_grades
from grader.ids import RowId
from grader.models import Assignment, Submission, User
from grader.notify import answer_messages, send_quietly
from grader.reads.submission_reads import student_submissions
from grader.roles import Power
from grader.runs.dispatch import chosen_timing
from grader.runs.timing_piece import time_if_passed_over

router = APIRouter()
REFUSED = {**ERRORS, 409: {"model": ErrorBody, "description": "the run is not a scored run of that student"}}
PATH = "/assignments/{slug}/students/{login}/counted-run"
GRADE = "/assignments/{slug}/students/{login}/grade"


class CountedRunIn(RequestBody):
    run_id: RowId = Field(description="a scored run of the student in this assignment")
    reason: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_TEXT)] | None = Field(
        None, description="why (staff only; shown on the staff's history page and in the gradebook)")


class CountedRunOut(BaseModel):
    student: str
    run_id: int | None = Field(description="the run the gradebook counts now; null without a scored run")
    chosen_by: str | None = Field(description="the login who chose it; null: the score policy's pick")
    by_student: bool = Field(description="the student chose it themselves")
    reason: str | None = Field(description="why it was chosen, when staff said")
    score_policy: str = Field(description="what picks the run when nobody chose: latest or best")
    students_choose: bool = Field(description="whether the assignment lets students choose")


def _history(session: Session, caller: Principal, slug: str, login: str) -> tuple[Assignment, User, list[Submission]]:
    """The assignment, the student and their submissions, when the caller is that student or
    staff of the assignment; 404 as if absent otherwise."""
    require(caller, SCOPE_READ)
    assignment = member_assignment(session, caller, slug)
    found = student_submissions(session, assignment, login)
    own = caller.user.username == login
    if found is None or not (own or caller.can_read_all_of(assignment.id)):
        # The login is not echoed: whether it names anyone is not the caller's to learn.
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no student of {slug!r} by that login that this token may read")
    return assignment, *found


def _counted(ctx: Context, session: Session, assignment: Assignment, student: User, subs: list[Submission]) -> Counted:
    runs = [run for sub in subs for run in sub.runs]
    return counted_for(session, assignment, student.id, runs, run_grades(session, runs, ctx.settings.course_zone))


def _out(ctx: Context, session: Session, assignment: Assignment, student: User,
         subs: list[Submission]) -> CountedRunOut:
    counted = _counted(ctx, session, assignment, student, subs)
    pin = counted.pin
    return CountedRunOut(student=student.username, run_id=counted.run_id, chosen_by=pin.by if pin else None,
                         by_student=bool(pin and pin.by_student), reason=pin.reason if pin else None,
                         score_policy=assignment.score_policy, students_choose=assignment.students_choose_counted_run)


def _may_change(session: Session, caller: Principal, assignment: Assignment, student: User) -> bool:
    """Whether the caller acts as staff (True) or as the student themselves (False: _history
    lets no one else this far); 403 when the token lacks the scope, or when the assignment or
    the staff's choice stops the student."""
    if caller.teaches(assignment.id):
        require(caller, SCOPE_REGRADE)
        return True
    require(caller, SCOPE_SUBMIT)
    refusal = student_refusal(session, assignment, student)
    if refusal is not None:
        raise ApiError(status.HTTP_403_FORBIDDEN, REFUSAL_TEXT[refusal].format(slug=assignment.slug))
    return False


@router.get(PATH, response_model=CountedRunOut, responses=ERRORS,
            summary="Which run counts for the student (the student themselves, or staff) and who chose it")
def read_counted(slug: str, login: str, ctx: Context, session: DB, caller: Caller) -> CountedRunOut:
    return _out(ctx, session, *_history(session, caller, slug, login))


@router.put(PATH, response_model=CountedRunOut, responses=REFUSED,
            summary="Choose the run that counts: staff for any scored run of the student, the student "
                    "for one of their own where the assignment allows it")
def choose_counted(slug: str, login: str, body: CountedRunIn, ctx: Context, session: DB,
                   caller: Caller) -> CountedRunOut:
    assignment, student, subs = _history(session, caller, slug, login)
    as_staff = _may_change(session, caller, assignment, student)
    run = next((r for sub in subs for r in sub.runs if r.id == body.run_id), None)
    if run is None or not is_scored(run):
        raise ApiError(status.HTTP_409_CONFLICT, f"run {body.run_id} is not a scored run of {login} in {slug}")
    choose(session, assignment, student.id, run, caller.user, (body.reason or None) if as_staff else None)
    time_if_passed_over(session, run, chosen_timing(ctx))  # stored before the answer
    return _out(ctx, session, assignment, student, subs)


@router.delete(PATH, response_model=CountedRunOut, responses=ERRORS,
               summary="Back to the score policy's pick (staff, or the student for their own choice)")
def clear_counted(slug: str, login: str, ctx: Context, session: DB, caller: Caller) -> CountedRunOut:
    assignment, student, subs = _history(session, caller, slug, login)
    _may_change(session, caller, assignment, student)
    clear(session, assignment, student.id)
    session.commit()
    return _out(ctx, session, assignment, student, subs)


# ---- the student's grade -------------------------------------------------------------------


class GradeEntryIn(RequestBody):
    kind: Literal["adjust", "manual", "take_back"] = Field(
        description="adjust: add `points` (negative: take off); manual: the grade is `points`, whatever the run; "
                    "take_back: the manual grade taken back (no points)")
    points: float | None = Field(None, allow_inf_nan=False, description="adjust: not zero, at most the total with "
                                 "its extra credit either way; manual: from 0 to the total with its extra credit")
    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TEXT,
                                             pattern=r"\S")] = Field(description="shown to the student")


class StudentGradeOut(BaseModel):
    student: str
    run_id: int | None = Field(description="the run that counts; null: none")
    grade: GradeOut | None = Field(description="the student's grade: that run's with the staff's entries (a manual "
                                   "grade alone); null: no scored run and no manual grade")


def _grade_out(ctx: Context, session: Session, assignment: Assignment, student: User,
               subs: list[Submission]) -> StudentGradeOut:
    counted = _counted(ctx, session, assignment, student, subs)
    return StudentGradeOut(student=student.username, run_id=counted.run_id,
                           grade=GradeOut.of(counted.grade) if counted.grade else None)


@router.get(GRADE, response_model=StudentGradeOut, responses=ERRORS,
            summary="The student's grade with the staff's entries (the student themselves, or staff)")
def read_grade(slug: str, login: str, ctx: Context, session: DB, caller: Caller) -> StudentGradeOut:
    return _grade_out(ctx, session, *_history(session, caller, slug, login))


@router.post(GRADE, status_code=status.HTTP_201_CREATED, response_model=StudentGradeOut,
             responses={**ERRORS, 409: {"model": ErrorBody, "description": "the entry is refused (the message says why)"}},
             summary="An entry on the student's grade (staff): an adjustment, a manual grade, or the manual grade "
                     "taken back; it answers the student's open regrade requests")
def add_grade_entry(slug: str, login: str, body: GradeEntryIn, ctx: Context, session: DB, caller: Caller,
                    background: BackgroundTasks) -> StudentGradeOut:
    assignment, student, subs = _history(session, caller, slug, login)
    refuse_unless(caller, Power.grade, assignment)
    try:
        made = adjustments.add_entry(session, assignment, student, caller.user, body.kind,
                                     "" if body.points is None else repr(body.points), body.reason)
    except WorkflowError as exc:
        session.rollback()
        raise ApiError(status.HTTP_409_CONFLICT, str(exc)) from exc
    mail = answer_messages(ctx.settings, made.answers)
    session.commit()  # stored before the 201
    background.add_task(send_quietly, ctx.settings.smtp, mail)  # after the answer
    return _grade_out(ctx, session, assignment, student, subs)
