"""REST API v1: submit, list and read submissions and runs, re-grade, gradebook export.

Bearer-token auth. Every 4xx/5xx answer under /api/ has the body
`{"error": {"code": ..., "message": ...}}` (see `install_error_handlers`)."""
from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, FastAPI, Header, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from grader import queries
from grader.auth import SCOPE_READ, SCOPE_READ_ALL, SCOPE_REGRADE, SCOPE_SUBMIT, Principal, authenticate
from grader.context import AppContext
from grader.course_ops import admission
from grader.models import Assignment, ProblemResult, Run, RunState, Submission, utcnow
from grader.runs.fairshare import Admission, admit
from grader.service import (MAX_IDEMPOTENCY_KEY, CommitUncertain, IdempotencyConflict, NotFound, Recorded,
                            commit_upload, find_user, get_assignment, record_regrade, record_upload)
from grader.uploads import ReceivedUpload, UploadError, earlier_upload_message, maybe_stored_message, receive_upload

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1", tags=["v1"])
_bearer = HTTPBearer(auto_error=False, description="API token (kg_...) from `grader token create`")

QUEUED_MESSAGE = "Upload stored; grading is queued."
BROKER_DOWN_MESSAGE = (
    "Upload stored, but the grading queue is unreachable right now; "
    "the run stays queued and will be picked up automatically when the queue is back."
)
WAITING_MESSAGE = ("Upload stored; it is graded as soon as your earlier run finishes "
                   "(one run per student at a time, so everyone gets a fair share of the GPUs).")
PAUSED_MESSAGE = ("Upload stored; the course staff have paused grading of this assignment, "
                  "and your run is graded when they resume it.")
ADMISSION_MESSAGES = {Admission.sent: QUEUED_MESSAGE, Admission.waiting: WAITING_MESSAGE,
                      Admission.paused: PAUSED_MESSAGE, Admission.unreachable: BROKER_DOWN_MESSAGE}
# The rows are committed but the database failed while the run was being sent: it is stored,
# and the reconciler sends it (never "nothing was recorded", which made students upload twice).
NOT_YET_SENT_MESSAGE = ("Upload stored; grading will start shortly: the grading database failed while "
                        "the run was being queued, and it is sent automatically. Do not upload it again.")


# ---- errors -------------------------------------------------------------------------------

ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
    507: "insufficient_storage",
}


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable code, e.g. not_found, forbidden")
    message: str = Field(description="what went wrong, for a person")
    details: list[dict[str, Any]] | None = Field(None, description="per-field problems of a 422")


class ErrorBody(BaseModel):
    error: ErrorDetail


class ApiError(HTTPException):
    """An HTTPException with an explicit error code (default: from the status)."""

    def __init__(self, status_code: int, message: str, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code, message, headers=headers)
        self.code = code or ERROR_CODES.get(status_code, "error")


def error_response(status_code: int, message: str, code: str | None = None,
                   details: list[dict[str, Any]] | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    error: dict[str, Any] = {"code": code or ERROR_CODES.get(status_code, "error"), "message": message}
    if details is not None:
        error["details"] = details
    return JSONResponse({"error": error}, status_code=status_code, headers=headers)


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def install_error_handlers(app: FastAPI) -> None:
    """The API's error body on /api/ paths; other paths keep FastAPI's default answers."""

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if not _is_api(request):
            return await http_exception_handler(request, exc)
        return error_response(exc.status_code, str(exc.detail), getattr(exc, "code", None),
                              headers=getattr(exc, "headers", None))

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        if not _is_api(request):
            return await request_validation_exception_handler(request, exc)
        details = [
            {"loc": [str(part) for part in e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        where = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details)
        return error_response(422, f"invalid request ({where})", details=details)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        if not _is_api(request):
            return PlainTextResponse("Internal Server Error", status_code=500)
        return error_response(500, "internal error; it has been logged")

    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(Exception, on_unexpected)


# Documented on every route (FastAPI adds 422 itself; its schema is overridden below).
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": ERROR_CODES[code]} for code in (401, 403, 404, 422)
}


# ---- schemas ------------------------------------------------------------------------------


class StageOut(BaseModel):
    status: str
    seconds: float | None = None
    log: str = ""


class ProblemResultOut(BaseModel):
    problem_id: str
    title: str
    status: str
    points: float
    max_points: float
    message: str | None
    details: dict[str, Any] | None


class RunOut(BaseModel):
    id: int
    submission_id: int
    state: str
    error_class: str | None
    message: str | None
    reason: str
    score: float | None
    attempts: int
    created_at: datetime
    enqueued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    worker_host: str | None
    toolchain: dict[str, Any] | None
    stages: dict[str, StageOut]
    results: list[ProblemResultOut]
    report: dict[str, Any] | None = None  # Gradescope-format results.json once scored
    progress: dict[str, Any] | None = Field(
        default=None, description='while active: {"stage"} or {"stage": "run", "problem", "index", "total"}')


class RunSummary(BaseModel):
    id: int
    state: str
    error_class: str | None
    score: float | None
    reason: str
    created_at: datetime


class SubmissionOut(BaseModel):
    id: int
    user: str
    assignment: str
    original_filename: str
    size_bytes: int
    sha256: str
    uploaded_at: datetime
    runs: list[RunSummary]


class SubmissionSummary(BaseModel):
    id: int
    user: str
    assignment: str
    original_filename: str
    size_bytes: int
    uploaded_at: datetime
    run_count: int
    latest_run: RunSummary | None
    url: str


class SubmissionPage(BaseModel):
    items: list[SubmissionSummary]
    total: int = Field(description="submissions matching the filters, over all pages")
    page: int
    page_size: int
    next: str | None = Field(description="path and query of the next page; null on the last page")


class RunListItem(RunSummary):
    submission_id: int
    attempts: int
    started_at: datetime | None
    finished_at: datetime | None
    problems: dict[str, float] = Field(description="problem id -> points (scored runs)")
    url: str


class SubmissionRuns(BaseModel):
    submission_id: int
    items: list[RunListItem]


class ProblemColumnOut(BaseModel):
    problem_id: str
    title: str
    max_points: float


class ScoredRunOut(BaseModel):
    run_id: int
    submission_id: int
    score: float = Field(description="after any late penalty")
    finished_at: datetime | None
    problems: dict[str, float]
    raw_score: float | None = Field(default=None, description="before the late penalty; null: none applied")
    late: str | None = Field(default=None, description="the late policy's reason; null: on time")


class GradebookRowOut(BaseModel):
    user: str
    name: str | None = Field(default=None, description="from the roster")
    section: str | None = Field(default=None, description="from the roster")
    submissions: int
    total: float | None = Field(description="score of the run the policy picks; null: no scored run")
    problems: dict[str, float] = Field(description="problem id -> points of that run")
    run_id: int | None
    latest: ScoredRunOut | None
    best: ScoredRunOut | None


class GradebookOut(BaseModel):
    assignment: str
    title: str
    total_points: float
    policy: Literal["latest", "best"]
    problems: list[ProblemColumnOut]
    rows: list[GradebookRowOut]


class RegradeRequest(BaseModel):
    submissions: list[int] | Literal["all", "latest"] = Field(
        description='submission ids, "all" (every submission of the assignment) or '
        '"latest" (each student\'s newest submission)',
        examples=[[12, 15], "all"],
    )


class RegradeAccepted(BaseModel):
    run_ids: list[int]
    submission_ids: list[int]
    queued: int = Field(description="how many runs reached the queue now (the rest are sent later)")
    message: str


class Accepted(BaseModel):
    submission_id: int
    run_id: int
    queued: bool
    message: str
    run_url: str


class SubmissionCreated(Accepted):
    sha256: str
    size_bytes: int
    earlier_upload: bool = Field(
        default=False, description="true (status 200): the same upload as an earlier submission (same "
        "Idempotency-Key, or the same bytes within the re-send window); nothing new was stored")


# ---- dependencies -------------------------------------------------------------------------


def get_context(request: Request) -> AppContext:
    return request.app.state.context  # type: ignore[no-any-return]


Context = Annotated[AppContext, Depends(get_context)]


def get_session(ctx: Context) -> Iterator[Session]:
    session = ctx.sessions()
    try:
        yield session
        session.commit()
    finally:
        session.close()


DB = Annotated[Session, Depends(get_session)]


def get_principal(
    session: DB, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    principal = authenticate(session, credentials.credentials) if credentials else None
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or invalid API token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return principal


Caller = Annotated[Principal, Depends(get_principal)]


def require(principal: Principal, scope: str) -> None:
    if not principal.can(scope):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"this token lacks the {scope!r} scope")


def _readable_submission(session: Session, principal: Principal, submission_id: int) -> Submission:
    submission = session.get(Submission, submission_id)
    # Someone else's submission, or one of an assignment not taught, reads as absent.
    if submission is None or not principal.can_read_submission(submission):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no submission {submission_id}")
    return submission


def admit_committed(ctx: AppContext, run_id: int) -> Admission | None:
    """`admit` for a run whose rows are committed; None when the database failed meanwhile
    (the run is stored and queued; the reconciler sends it)."""
    try:
        return admit(ctx.celery, ctx.sessions, run_id, ctx.settings.task_queue)
    except SQLAlchemyError:
        log.warning("run %s is stored but the database failed while sending it; the reconciler sends it",
                    run_id, exc_info=True)
        return None


def admission_message(admitted: Admission | None) -> str:
    return NOT_YET_SENT_MESSAGE if admitted is None else ADMISSION_MESSAGES[admitted]


def _acceptance(ctx: AppContext, submission: Submission, run: Run) -> dict[str, Any]:
    admitted = admit_committed(ctx, run.id)
    return {
        "submission_id": submission.id,
        "run_id": run.id,
        "queued": admitted is not None and admitted is not Admission.unreachable,
        "message": admission_message(admitted),
        "run_url": f"/api/v1/runs/{run.id}",
    }


def _earlier_acceptance(ctx: AppContext, recorded: Recorded) -> dict[str, Any]:
    """The answer to a repeat: the earlier submission and its run, sent now if it never was
    (the earlier request may have failed before sending it)."""
    submission, run = recorded.submission, recorded.run
    unsent = run.state is RunState.queued and run.enqueued_at is None
    body = _acceptance(ctx, submission, run) if unsent else {
        "submission_id": submission.id, "run_id": run.id, "queued": True, "message": "",
        "run_url": f"/api/v1/runs/{run.id}"}
    body["message"] = f"{earlier_upload_message(submission.id, run.id)} {body['message']}".strip()
    return body


# ---- routes -------------------------------------------------------------------------------


@router.post(
    "/submissions",
    status_code=status.HTTP_201_CREATED,
    response_model=SubmissionCreated,
    responses={**ERRORS,
               200: {"model": SubmissionCreated,
                     "description": "the same upload as an earlier submission (same Idempotency-Key, or the same "
                                    "bytes within the re-send window): that submission and its run"},
               413: {"model": ErrorBody, "description": "upload too large"},
               415: {"model": ErrorBody, "description": "not a multipart upload"},
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
) -> dict[str, Any]:
    require(caller, SCOPE_SUBMIT)
    session.commit()  # hand the connection back to the pool while the body streams in

    def check_admission(assignment: Assignment) -> None:
        refusal = admission(session, ctx.settings, caller.user, assignment, utcnow())
        if refusal is not None:  # no submission is recorded, and receive_upload removes the blob
            retry = {"Retry-After": str(refusal.retry_after_s)} if refusal.retry_after_s else None
            raise ApiError(refusal.status_code, refusal.message, refusal.code, headers=retry)

    def record(upload: ReceivedUpload) -> dict[str, Any]:  # blocking database and broker calls: off the event loop
        try:
            assignment = get_assignment(session, upload.fields.get("assignment", ctx.default_assignment))
        except NotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
        try:
            recorded = record_upload(session, caller.user, assignment, upload.filename, upload.blob,
                                     idempotency_key, ctx.settings.upload_dedup_window_s,
                                     lambda: check_admission(assignment))
        except IdempotencyConflict as exc:
            raise ApiError(422, str(exc), "idempotency_key_reused") from exc
        try:
            commit_upload(session)  # durable before the task is sent and before the client hears 201
        except CommitUncertain as exc:
            raise ApiError(503, maybe_stored_message(ctx.settings.upload_dedup_window_s), "outcome_unknown",
                           headers={"Retry-After": "10"}) from exc
        # From here on the upload is stored: no answer may say otherwise.
        submission = recorded.submission
        if recorded.earlier:
            response.status_code = status.HTTP_200_OK
            body = _earlier_acceptance(ctx, recorded)
        else:
            body = _acceptance(ctx, submission, recorded.run)
        return {**body, "sha256": submission.sha256, "size_bytes": submission.size_bytes,
                "earlier_upload": recorded.earlier}

    try:
        async with receive_upload(request, ctx) as upload:
            return await run_in_threadpool(record, upload)
    except UploadError as exc:
        raise HTTPException(exc.status_code, exc.message) from exc


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
    page_size: Annotated[int, Query(ge=1, le=queries.MAX_PAGE_SIZE, description="items per page")] = 20,
    user: Annotated[str | None, Query(description="only this login's submissions (staff)")] = None,
    assignment: Annotated[str | None, Query(description="only this assignment (slug)")] = None,
) -> dict[str, Any]:
    require(caller, SCOPE_READ)
    user_id = None
    if user is not None and user != caller.user.username:
        if not caller.can(SCOPE_READ_ALL):
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                "listing another user's submissions needs the 'read:all' scope")
        row = find_user(session, user)
        if row is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no user {user!r}")
        user_id = row.id
    elif user is not None:
        user_id = caller.user.id
    assignment_id = _member_assignment(session, caller, assignment).id if assignment is not None else None
    result = queries.list_submissions(session, user_id=user_id, assignment_id=assignment_id,
                                      visible=queries.submission_visibility(caller), page=page, page_size=page_size)
    next_link = None
    if result.has_next:
        params = {k: v for k, v in request.query_params.items() if k != "page"}
        next_link = f"{request.url.path}?{urlencode({**params, 'page': page + 1})}"
    return {
        "items": [
            {
                "id": sub.id,
                "user": sub.user.username,
                "assignment": sub.assignment.slug,
                "original_filename": sub.original_filename,
                "size_bytes": sub.size_bytes,
                "uploaded_at": sub.uploaded_at,
                "run_count": len(sub.runs),
                "latest_run": _run_summary(sub.runs[-1]) if sub.runs else None,
                "url": f"/api/v1/submissions/{sub.id}",
            }
            for sub in result.items
        ],
        "total": result.total,
        "page": result.page,
        "page_size": result.page_size,
        "next": next_link,
    }


@router.get(
    "/submissions/{submission_id}",
    response_model=SubmissionOut,
    responses=ERRORS,
    summary="One submission and its runs (history)",
)
def read_submission(submission_id: int, session: DB, caller: Caller) -> dict[str, Any]:
    sub = _readable_submission(session, caller, submission_id)
    return {
        "id": sub.id,
        "user": sub.user.username,
        "assignment": sub.assignment.slug,
        "original_filename": sub.original_filename,
        "size_bytes": sub.size_bytes,
        "sha256": sub.sha256,
        "uploaded_at": sub.uploaded_at,
        "runs": [_run_summary(r) for r in sub.runs],
    }


@router.get(
    "/submissions/{submission_id}/runs",
    response_model=SubmissionRuns,
    responses=ERRORS,
    summary="The runs of one submission, oldest first, with per-problem points",
)
def list_submission_runs(submission_id: int, session: DB, caller: Caller) -> dict[str, Any]:
    require(caller, SCOPE_READ)
    sub = _readable_submission(session, caller, submission_id)
    return {
        "submission_id": sub.id,
        "items": [
            {
                **_run_summary(r),
                "submission_id": r.submission_id,
                "attempts": r.attempts,
                "started_at": r.started_at,
                "finished_at": r.finished_at,
                "problems": {res.problem_id: res.points for res in r.results},
                "url": f"/api/v1/runs/{r.id}",
            }
            for r in queries.submission_runs(session, sub.id)
        ],
    }


@router.post(
    "/submissions/{submission_id}/regrade",
    status_code=status.HTTP_201_CREATED,
    response_model=Accepted,
    responses=ERRORS,
    summary="Grade the same upload again as a new run (history is kept)",
)
def regrade_submission(submission_id: int, ctx: Context, session: DB, caller: Caller) -> dict[str, Any]:
    require(caller, SCOPE_REGRADE)
    sub = _readable_submission(session, caller, submission_id)
    if not caller.teaches(sub.assignment_id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"only staff of {sub.assignment.slug!r} re-grade its submissions")
    run = record_regrade(session, sub)
    session.commit()
    return _acceptance(ctx, sub, run)


@router.get(
    "/runs/{run_id}",
    response_model=RunOut,
    responses=ERRORS,
    summary="One run: state, logs, toolchain, per-problem results and the report",
)
def read_run(run_id: int, session: DB, caller: Caller) -> dict[str, Any]:
    require(caller, SCOPE_READ)
    run = session.get(Run, run_id)
    if run is None or not caller.can_read_submission(run.submission):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id}")
    return run_to_dict(run)


PolicyParam = Annotated[
    Literal["latest", "best"] | None,
    Query(description="which scored run counts: the newest submission's, or the best one "
                      "(default: the assignment's own policy)"),
]


@router.get(
    "/assignments/{slug}/gradebook",
    response_model=GradebookOut,
    responses=ERRORS,
    summary="Gradebook (staff): one row per student with the graded run's total and per-problem points",
)
def read_gradebook(slug: str, session: DB, caller: Caller, policy: PolicyParam = None) -> dict[str, Any]:
    require(caller, SCOPE_READ_ALL)
    return gradebook_to_dict(queries.gradebook(session, _taught_assignment(session, caller, slug), policy))


def gradebook_to_dict(book: queries.Gradebook) -> dict[str, Any]:
    """The JSON export (GradebookOut's shape), shared by the API and the instructor's web page."""
    return {
        "assignment": book.assignment,
        "title": book.title,
        "total_points": book.total_points,
        "policy": book.policy,
        "problems": [vars(p) for p in book.problems],
        "rows": [
            {
                "user": row.username,
                "name": row.full_name,
                "section": row.section,
                "submissions": row.submissions,
                "total": row.total,
                "problems": dict(row.graded.problems) if row.graded else {},
                "run_id": row.graded.run_id if row.graded else None,
                "latest": vars(row.latest) if row.latest else None,
                "best": vars(row.best) if row.best else None,
            }
            for row in book.rows
        ],
    }


@router.get(
    "/assignments/{slug}/gradebook.csv",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"text/csv": {}}, "description": "Canvas-ready CSV"}},
    summary="Gradebook as CSV for Canvas import (staff): Student, SIS Login ID, total, one column per problem",
)
def read_gradebook_csv(slug: str, session: DB, caller: Caller, policy: PolicyParam = None) -> Response:
    require(caller, SCOPE_READ_ALL)
    book = queries.gradebook(session, _taught_assignment(session, caller, slug), policy)
    return Response(
        gradebook_csv(book),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{book.assignment}-gradebook-{book.policy}.csv"'},
    )


@router.post(
    "/assignments/{slug}/regrade",
    status_code=status.HTTP_201_CREATED,
    response_model=RegradeAccepted,
    responses=ERRORS,
    summary='Re-grade submissions of an assignment (staff): ids, "all" or "latest"; each gets a new run',
)
def regrade_assignment(
    slug: str, ctx: Context, session: DB, caller: Caller, body: Annotated[RegradeRequest, Body()]
) -> dict[str, Any]:
    require(caller, SCOPE_REGRADE)
    require(caller, SCOPE_READ_ALL)
    assignment = _taught_assignment(session, caller, slug)
    if isinstance(body.submissions, str):
        targets = queries.regrade_targets(session, assignment, body.submissions)
    else:
        wanted = list(dict.fromkeys(body.submissions))
        found = {
            s.id: s
            for s in session.scalars(
                select(Submission).where(Submission.id.in_(wanted), Submission.assignment_id == assignment.id)
            )
        }
        missing = [i for i in wanted if i not in found]
        if missing:  # nothing is created unless every id is valid
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no submissions {missing} in assignment {slug!r}")
        targets = [found[i] for i in wanted]
    runs = [record_regrade(session, sub) for sub in targets]
    session.commit()
    admissions = [admit_committed(ctx, run.id) for run in runs]
    sent = sum(a is Admission.sent for a in admissions)
    return {
        "run_ids": [r.id for r in runs],
        "submission_ids": [s.id for s in targets],
        "queued": sent,
        "message": f"{len(runs)} run(s) created; {sent} queued now"
        + ("" if sent == len(runs) else "; the rest follow one per student as earlier runs finish"
           + (" and the queue is back" if Admission.unreachable in admissions else "")),
    }


# ---- helpers ------------------------------------------------------------------------------


def _member_assignment(session: Session, caller: Principal, slug: str) -> Assignment:
    """The assignment `slug` when the caller is enrolled in it; 404 otherwise, as if absent."""
    try:
        assignment = get_assignment(session, slug)
    except NotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    if not caller.member_of(assignment.id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no assignment {slug!r}")
    return assignment


def _taught_assignment(session: Session, caller: Principal, slug: str) -> Assignment:
    """The assignment `slug` when the caller reads all of it (its staff); 403 for its students."""
    assignment = _member_assignment(session, caller, slug)
    if not caller.can_read_all_of(assignment.id):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"only staff of {slug!r} may do this")
    return assignment


def _run_summary(r: Run) -> dict[str, Any]:
    return {
        "id": r.id,
        "state": r.state.value,
        "error_class": r.error_class.value if r.error_class else None,
        "score": r.score,
        "reason": r.reason,
        "created_at": r.created_at,
    }


def _csv_cell(value: object) -> object:
    # A cell a spreadsheet would read as a formula is quoted as text.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _fmt(points: float | None) -> str:
    return "" if points is None else f"{points:g}"


def gradebook_csv(book: queries.Gradebook) -> str:
    """Canvas's import matches rows on `SIS Login ID` (the login); `Student` is the roster's
    name where there is one. A blank score leaves Canvas unchanged."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["Student", "SIS Login ID", f"{book.title} ({book.total_points:g})"]
        + [f"{p.problem_id} {p.title} ({p.max_points:g})" for p in book.problems]
    )
    for row in book.rows:
        problems = row.graded.problems if row.graded else {}
        writer.writerow(
            [_csv_cell(row.full_name or row.username), _csv_cell(row.username), _fmt(row.total)]
            + [_fmt(problems.get(p.problem_id)) if row.graded else "" for p in book.problems]
        )
    return out.getvalue()


def run_to_dict(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "submission_id": run.submission_id,
        "state": run.state.value,
        "error_class": run.error_class.value if run.error_class else None,
        "message": run.message,
        "reason": run.reason,
        "score": run.score,
        "attempts": run.attempts,
        "created_at": run.created_at,
        "enqueued_at": run.enqueued_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "worker_host": run.worker_host,
        "toolchain": run.toolchain,
        "stages": run.stages or {},
        "results": [_result_to_dict(r) for r in run.results],
        "report": run.report,
        "progress": run.progress,
    }


def _result_to_dict(r: ProblemResult) -> dict[str, Any]:
    return {
        "problem_id": r.problem_id,
        "title": r.title,
        "status": r.status,
        "points": r.points,
        "max_points": r.max_points,
        "message": r.message,
        "details": r.details,
    }
