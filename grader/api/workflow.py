"""/api/v1 regrade requests and comments on a run (grader.course.adjustments), under the web pages'
rules (grader.pages.requests): a run that is not the caller's own, or not of an assignment
the caller teaches, reads as absent (404). Only the run's student asks for a regrade; only
staff of its assignment answer a request (403 for the others who may read it). Writing (a
request, a comment) needs the `submit` scope, answering `regrade`; a decision the workflow
cannot take (a second open request, a request already answered) is 409 with its reason."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, BackgroundTasks, HTTPException, Query, status
from pydantic import AliasPath, BaseModel, Field, StringConstraints, field_validator
from sqlalchemy.orm import Session

from grader.accepting import admit_committed
from grader.api.deps import DB, Caller, Context, refuse_unless, require, taught_assignment
from grader.api.errors import ERRORS, ApiError, ErrorBody
from grader.api.schemas import AdjustmentOut, FromRow, RequestBody
from grader.auth.credentials import SCOPE_READ, SCOPE_REGRADE, SCOPE_SUBMIT, Principal
from grader.course import adjustments
from grader.course.adjustments import MAX_TEXT, Show, WorkflowError
from grader.ids import RowId
from grader.models import RegradeRequest, Run, RunComment
from grader.notify import answer_messages, request_messages, send_quietly
from grader.roles import Power

router = APIRouter()
# Some text besides white space (the pattern says so in the schema too), at most MAX_TEXT long.
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TEXT, pattern=r"\S")]
REFUSED = {**ERRORS, 409: {"model": ErrorBody, "description": "the workflow refuses it now (the message says why)"}}


# ---- bodies --------------------------------------------------------------------------------


class RegradeAsk(RequestBody):
    reason: Text = Field(description="why the run should be looked at again; shown to the course staff")


class RegradeByRegrading(RequestBody):
    action: Literal["regrade"] = Field(description="accept by grading the submission again (a new run)")
    reply: str = Field("", max_length=MAX_TEXT, description="shown to the student (optional)")


class RegradeByAdjusting(RequestBody):
    action: Literal["adjust"] = Field(description="accept by adding `points` to the student's grade in the "
                                                         "assignment (it stays whichever run counts)")
    reply: Text = Field(description="the adjustment's reason, shown to the student")
    points: float = Field(allow_inf_nan=False, json_schema_extra={"not": {"const": 0}},
                          description="points to add (negative: to take off), not zero, at most the "
                                      "assignment's total with its extra credit either way (409 beyond it)")

    @field_validator("points")
    @classmethod
    def _not_zero(cls, points: float) -> float:
        if points == 0:
            raise ValueError("adjust needs points other than zero")
        return points


class RegradeRejected(RequestBody):
    action: Literal["reject"] = Field(description="refuse the request")
    reply: Text = Field(description="why, shown to the student")


# One body per action, told apart by `action`, so the schema says what each one needs.
RegradeDecision = Annotated[RegradeByRegrading | RegradeByAdjusting | RegradeRejected, Field(discriminator="action")]


class CommentIn(RequestBody):
    body: Text = Field(description="the comment, shown on the run page")


class RegradeRequestOut(FromRow):
    id: int
    run_id: int
    student: str = Field(validation_alias=AliasPath("student", "username"))
    reason: str
    state: Literal["open", "accepted", "rejected"]
    created_at: datetime
    decided_by: str | None = Field(None, description="the staff login who answered; null while open")
    decided_at: datetime | None
    reply: str | None = Field(description="the staff's answer, shown to the student")
    regrade_run_id: int | None = Field(description="accepted by a re-grade: the new run")
    adjustment: AdjustmentOut | None = Field(None, description="accepted by an adjustment: it")

    @classmethod
    def of_row(cls, row: RegradeRequest) -> RegradeRequestOut:
        made = row.adjustment
        return cls.of(row, decided_by=row.decided_by.username if row.decided_by else None,
                      adjustment=AdjustmentOut.of(made, by=made.by.username, at=made.created_at) if made else None)


class RegradeRequestList(BaseModel):
    items: list[RegradeRequestOut] = Field(description="a run's: oldest first; an assignment's: open ones "
                                           "first (oldest first), then the answered ones, newest first")


class CommentOut(FromRow):
    id: int
    run_id: int
    author: str = Field(validation_alias=AliasPath("author", "username"))
    body: str
    created_at: datetime


class CommentList(BaseModel):
    items: list[CommentOut] = Field(description="oldest first")


# ---- who may do what ------------------------------------------------------------------------


def _readable_run(session: Session, caller: Principal, run_id: int) -> Run:
    """The run when the caller reads it (their own, or of an assignment they teach); 404 otherwise."""
    require(caller, SCOPE_READ)
    run = session.get(Run, run_id)
    if run is None or not caller.can_read_submission(run.submission):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id}")
    return run


def _refused(session: Session, exc: WorkflowError) -> ApiError:
    session.rollback()
    return ApiError(status.HTTP_409_CONFLICT, str(exc))


# ---- regrade requests ----------------------------------------------------------------------


@router.get("/runs/{run_id}/regrade-requests", response_model=RegradeRequestList, responses=ERRORS,
            summary="A run's regrade requests with the staff's answers, oldest first")
def list_run_requests(run_id: RowId, session: DB, caller: Caller) -> RegradeRequestList:
    run = _readable_run(session, caller, run_id)
    return RegradeRequestList(items=[RegradeRequestOut.of_row(r) for r in run.regrade_requests])


@router.post("/runs/{run_id}/regrade-requests", status_code=status.HTTP_201_CREATED,
             response_model=RegradeRequestOut, responses=REFUSED,
             summary="Ask the staff to look at one's own finished run again (one open request per run)")
def create_request(run_id: RowId, body: RegradeAsk, ctx: Context, session: DB, caller: Caller,
                   background: BackgroundTasks) -> RegradeRequestOut:
    run = _readable_run(session, caller, run_id)
    require(caller, SCOPE_SUBMIT)
    if run.submission.user_id != caller.user.id:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only the run's own student asks for its regrade")
    try:
        row = adjustments.request_regrade(session, run, caller.user, body.reason)
    except WorkflowError as exc:
        raise _refused(session, exc) from exc
    mail = request_messages(session, ctx.settings, row)
    session.commit()  # stored before the 201
    background.add_task(send_quietly, ctx.settings.smtp, mail)  # after the answer
    return RegradeRequestOut.of_row(row)


@router.get("/assignments/{slug}/regrade-requests", response_model=RegradeRequestList, responses=ERRORS,
            summary="The assignment's regrade requests (staff): open ones first, oldest first")
def list_assignment_requests(slug: str, session: DB, caller: Caller, show: Annotated[Show, Query(
        description="open: waiting for an answer; answered; mine: those the caller answered; all")] = Show.all,
                             ) -> RegradeRequestList:
    assignment = taught_assignment(session, caller, slug)
    listed = adjustments.shown(adjustments.assignment_requests(session, assignment), show, caller.user)
    return RegradeRequestList(items=[RegradeRequestOut.of_row(r) for r in listed])


@router.post("/regrade-requests/{request_id}/decision", response_model=RegradeRequestOut, responses=REFUSED,
             summary="Answer an open regrade request (staff): re-grade, adjust the grade, or reject with a reply")
def decide_request(request_id: RowId, body: RegradeDecision, ctx: Context, session: DB, caller: Caller,
                   background: BackgroundTasks) -> RegradeRequestOut:
    asked = session.get(RegradeRequest, request_id)
    if asked is None or not caller.can_read_submission(asked.run.submission):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no regrade request {request_id}")
    require(caller, SCOPE_REGRADE)
    refuse_unless(caller, Power.grade, asked.run.submission.assignment)
    new_run: int | None = None
    answered = [asked]
    try:
        if isinstance(body, RegradeByRegrading):
            made = adjustments.accept_with_regrade(session, asked, caller.user, body.reply)
            new_run, answered = made.id, made.answers
        elif isinstance(body, RegradeByAdjusting):
            answered = adjustments.accept_with_adjustment(session, asked, caller.user, str(body.points),
                                                          body.reply).answers
        else:
            adjustments.reject(asked, caller.user, body.reply)
    except WorkflowError as exc:
        raise _refused(session, exc) from exc
    mail = answer_messages(ctx.settings, answered)
    session.commit()
    if new_run is not None:
        admit_committed(ctx, new_run)  # committed first: the new run's page says if it waits to be sent
    background.add_task(send_quietly, ctx.settings.smtp, mail)  # after the answer
    return RegradeRequestOut.of_row(asked)


# ---- comments ------------------------------------------------------------------------------


@router.get("/runs/{run_id}/comments", response_model=CommentList, responses=ERRORS,
            summary="The comments on a run by its student and the staff, oldest first")
def list_comments(run_id: RowId, session: DB, caller: Caller) -> CommentList:
    return CommentList(items=[CommentOut.of(c) for c in _readable_run(session, caller, run_id).comments])


@router.post("/runs/{run_id}/comments", status_code=status.HTTP_201_CREATED, response_model=CommentOut,
             responses=ERRORS, summary="Comment on one's own run, or as staff on a run of a taught assignment")
def create_comment(run_id: RowId, body: CommentIn, session: DB, caller: Caller) -> CommentOut:
    run = _readable_run(session, caller, run_id)
    require(caller, SCOPE_SUBMIT)
    row: RunComment = adjustments.comment(session, run, caller.user, body.body)
    session.commit()  # stored before the 201
    return CommentOut.of(row)
