"""/api/v1/submissions: upload (streamed, size-capped), list, read, the runs of one, re-grade one."""
from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, BackgroundTasks, Header, HTTPException, Query, Request, Response, status
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from grader.accepting import accept_upload
from grader.api.acceptance import acceptance, run_url, upload_acceptance
from grader.api.deps import DB, Caller, Context, member_assignment, readable_submission, refuse_unless, require
from grader.api.errors import ERRORS, ApiError, ErrorBody
from grader.api.schemas import (
    Accepted,
    RunListItem,
    SubmissionCreated,
    SubmissionOut,
    SubmissionPage,
    SubmissionRuns,
    SubmissionSummary,
)
from grader.auth.credentials import SCOPE_READ, SCOPE_READ_ALL, SCOPE_REGRADE, SCOPE_SUBMIT, Principal
from grader.course import adjustments
from grader.ids import RowId
from grader.models import Submission
from grader.notify import answer_messages, send_quietly
from grader.reads import submission_reads
from grader.roles import Power
from grader.service import MAX_IDEMPOTENCY_KEY, find_user
from grader.storage.uploads import UploadError, receive_upload

router = APIRouter()


def submission_url(submission_id: int) -> str:
    return f"/api/v1/submissions/{submission_id}"


@router.post(
    "/submissions",
    status_code=status.HTTP_201_CREATED,
    response_model=SubmissionCreated,
    responses={**ERRORS,
               200: {"model": SubmissionCreated,
                     "description": "the same upload as an earlier submission (same Idempotency-Key, or the same "
                                    "bytes within the re-send window): that submission and its run"},
               413: {"model": ErrorBody, "description": "upload too large"},
               415: {"model": ErrorBody, "description": "not a multipart upload (`unsupported_media_type`), or the "
                                                        "file is not a zip (`not_a_zip`)"},
               422: {"model": ErrorBody, "description": "a bad field (`validation_error`), or a zip that is damaged "
                                                        "or incomplete, cut short (`damaged_zip`)"},
               429: {"model": ErrorBody, "description": "upload quota reached (see Retry-After)"},
               503: {"model": ErrorBody, "description": "the database failed: `unavailable` (nothing was "
                                                        "recorded) or `outcome_unknown` (it may be stored: send it "
                                                        "again with the same Idempotency-Key)"},
               507: {"model": ErrorBody, "description": "the server is out of storage; nothing was stored"}},
    summary="Upload a zipped submission (multipart field 'file'; optional field 'assignment')",
)
async def create_submission(
    request: Request, response: Response, ctx: Context, session: DB, caller: Caller,
    idempotency_key: Annotated[str | None, Header(
        alias="Idempotency-Key", min_length=1, max_length=MAX_IDEMPOTENCY_KEY, pattern=r"^[!-~]+$",
        description="a client-chosen key (visible ASCII, e.g. a UUID): sending the same upload again with it "
                    "answers with the submission it created instead of a new one")] = None,
) -> SubmissionCreated:
    require(caller, SCOPE_SUBMIT)
    session.commit()  # hand the connection back to the pool while the body streams in
    try:
        async with receive_upload(request, ctx) as upload:
            accepted = await run_in_threadpool(accept_upload, ctx, caller.user.id, upload, idempotency_key,
                                               keyed=True)
    except UploadError as exc:
        retry = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
        raise ApiError(exc.status_code, exc.message, exc.code, headers=retry) from exc
    if accepted.earlier:
        response.status_code = status.HTTP_200_OK
    return upload_acceptance(accepted)


@router.get(
    "/submissions",
    response_model=SubmissionPage,
    responses=ERRORS,
    summary="List submissions, newest first (students: their own; `read:all`: everyone's in the assignments "
            "the caller teaches)",
)
def list_submissions(
    request: Request,
    session: DB,
    caller: Caller,
    page: Annotated[int, Query(ge=1, description="1-based page number")] = 1,
    page_size: Annotated[int, Query(ge=1, le=submission_reads.MAX_PAGE_SIZE, description="items per page")] = 20,
    user: Annotated[str | None, Query(description="only this login's submissions (staff)")] = None,
    assignment: Annotated[str | None, Query(description="only this assignment (slug)")] = None,
) -> SubmissionPage:
    require(caller, SCOPE_READ)
    user_id = _listed_user(session, caller, user)
    assignment_id = member_assignment(session, caller, assignment).id if assignment is not None else None
    result = submission_reads.list_submissions(session, user_id=user_id, assignment_id=assignment_id,
                                      visible=submission_reads.submission_visibility(caller), page=page, page_size=page_size)
    next_link = None
    if result.has_next:
        params = {k: v for k, v in request.query_params.items() if k != "page"}
        next_link = f"{request.url.path}?{urlencode({**params, 'page': page + 1})}"
    return SubmissionPage(items=[_summary(sub) for sub in result.items], total=result.total, page=result.page,
                          page_size=result.page_size, next=next_link)


def _listed_user(session: Session, caller: Principal, user: str | None) -> int | None:
    """The id of the user whose submissions are listed; None: every one the caller may read."""
    if user is None:
        return None
    if user == caller.user.username:
        return caller.user.id
    if not caller.can(SCOPE_READ_ALL):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "listing another user's submissions needs the 'read:all' scope")
    row = find_user(session, user)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no user {user!r}")
    return row.id


def _summary(sub: Submission) -> SubmissionSummary:
    return SubmissionSummary.of(sub, run_count=len(sub.runs), latest_run=sub.runs[-1] if sub.runs else None,
                                url=submission_url(sub.id))


@router.get(
    "/submissions/{submission_id}",
    response_model=SubmissionOut,
    responses=ERRORS,
    summary="One submission and its runs (history)",
)
def read_submission(submission_id: RowId, session: DB, caller: Caller) -> SubmissionOut:
    return SubmissionOut.of(readable_submission(session, caller, submission_id))


@router.get(
    "/submissions/{submission_id}/runs",
    response_model=SubmissionRuns,
    responses=ERRORS,
    summary="The runs of one submission, oldest first, with per-problem points",
)
def list_submission_runs(submission_id: RowId, session: DB, caller: Caller) -> SubmissionRuns:
    require(caller, SCOPE_READ)
    sub = readable_submission(session, caller, submission_id)
    items = [RunListItem.of(r, problems={res.problem_id: res.points for res in r.results}, url=run_url(r.id))
             for r in submission_reads.submission_runs(session, sub.id)]
    return SubmissionRuns(submission_id=sub.id, items=items)


@router.post(
    "/submissions/{submission_id}/regrade",
    status_code=status.HTTP_201_CREATED,
    response_model=Accepted,
    responses=ERRORS,
    summary="Grade the same upload again as a new run (history is kept)",
)
def regrade_submission(submission_id: RowId, ctx: Context, session: DB, caller: Caller,
                       background: BackgroundTasks) -> Accepted:
    """The new run answers the open regrade requests of the submission's runs (their students are
    mailed where mail is set up)."""
    require(caller, SCOPE_REGRADE)
    sub = readable_submission(session, caller, submission_id)
    refuse_unless(caller, Power.grade, sub.assignment)
    run = adjustments.regrade(session, sub, caller.user)
    mail = answer_messages(ctx.settings, run.answers)
    session.commit()
    background.add_task(send_quietly, ctx.settings.smtp, mail)  # after the answer
    return acceptance(ctx, sub, run)
