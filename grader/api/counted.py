"""/api/v1 the run that counts for one student in an assignment (grader.course.counted_choice),
under the pages' rules: staff of the assignment choose any scored run of a student (scope
`regrade`); a student chooses one of their own (scope `submit`) only where the assignment lets
students choose and staff have not, refused with 403 and the pages' words otherwise. Another
student's choice reads as absent (404); a run that is not a scored run of that student is 409."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field, StringConstraints
from sqlalchemy.orm import Session

from grader.api.deps import DB, Caller, Context, member_assignment, require
from grader.api.errors import ERRORS, ApiError, ErrorBody
from grader.auth.credentials import SCOPE_READ, SCOPE_REGRADE, SCOPE_SUBMIT, Principal
from grader.course.adjustments import MAX_TEXT
from grader.course.counted_choice import REFUSAL_TEXT, choose, clear, is_scored, student_refusal
from grader.models import Assignment, Submission, User
from grader.reads.grade_reads import counted_for, run_grades
from grader.reads.submission_reads import student_submissions

router = APIRouter()
REFUSED = {**ERRORS, 409: {"model": ErrorBody, "description": "the run is not a scored run of that student"}}
PATH = "/assignments/{slug}/students/{login}/counted-run"


class CountedRunIn(BaseModel):
    run_id: int = Field(description="a scored run of the student in this assignment")
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


def _out(ctx: Context, session: Session, assignment: Assignment, student: User,
         subs: list[Submission]) -> CountedRunOut:
    runs = [run for sub in subs for run in sub.runs]
    counted = counted_for(session, assignment, student.id, runs, run_grades(session, runs, ctx.settings.course_zone))
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
    session.commit()  # stored before the answer
    return _out(ctx, session, assignment, student, subs)


@router.delete(PATH, response_model=CountedRunOut, responses=ERRORS,
               summary="Back to the score policy's pick (staff, or the student for their own choice)")
def clear_counted(slug: str, login: str, ctx: Context, session: DB, caller: Caller) -> CountedRunOut:
    assignment, student, subs = _history(session, caller, slug, login)
    _may_change(session, caller, assignment, student)
    clear(session, assignment, student.id)
    session.commit()
    return _out(ctx, session, assignment, student, subs)
