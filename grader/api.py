"""REST API v1: submit, read submissions and runs, re-grade. Bearer-token auth."""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy.orm import Session

from grader.auth import SCOPE_READ, SCOPE_REGRADE, SCOPE_SUBMIT, Principal, authenticate
from grader.context import AppContext
from grader.dispatch import send_run
from grader.models import ProblemResult, Run, Submission
from grader.service import NotFound, get_assignment, record_regrade, record_submission
from grader.uploads import UploadError, receive_upload

router = APIRouter(prefix="/api/v1", tags=["v1"])
_bearer = HTTPBearer(auto_error=False, description="API token (kg_...) from `grader token create`")

QUEUED_MESSAGE = "Upload stored; grading is queued."
BROKER_DOWN_MESSAGE = (
    "Upload stored, but the grading queue is unreachable right now; "
    "the run stays queued and will be picked up automatically when the queue is back."
)


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


class Accepted(BaseModel):
    submission_id: int
    run_id: int
    queued: bool
    message: str
    run_url: str


class SubmissionCreated(Accepted):
    sha256: str
    size_bytes: int


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
    # Someone else's submission reads as absent: its existence is not revealed.
    if submission is None or not principal.can_read_submission_of(submission.user_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no submission {submission_id}")
    return submission


def _acceptance(ctx: AppContext, submission: Submission, run: Run) -> dict[str, Any]:
    queued = send_run(ctx.celery, ctx.sessions, run.id, ctx.settings.task_queue)
    return {
        "submission_id": submission.id,
        "run_id": run.id,
        "queued": queued,
        "message": QUEUED_MESSAGE if queued else BROKER_DOWN_MESSAGE,
        "run_url": f"/api/v1/runs/{run.id}",
    }


# ---- routes -------------------------------------------------------------------------------


@router.post(
    "/submissions",
    status_code=status.HTTP_201_CREATED,
    response_model=SubmissionCreated,
    summary="Upload a zipped submission (multipart field 'file'; optional field 'assignment')",
)
async def create_submission(request: Request, ctx: Context, session: DB, caller: Caller) -> dict[str, Any]:
    require(caller, SCOPE_SUBMIT)
    try:
        upload = await receive_upload(request, ctx.blobs, ctx.settings.max_upload_bytes)
    except UploadError as exc:
        raise HTTPException(exc.status_code, exc.message) from exc
    try:
        assignment = get_assignment(session, upload.fields.get("assignment", ctx.default_assignment))
    except NotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    submission, run = record_submission(session, caller.user, assignment, upload.filename, upload.blob)
    session.commit()  # durable before the task is sent and before the client hears 201
    body = _acceptance(ctx, submission, run)
    return {**body, "sha256": submission.sha256, "size_bytes": submission.size_bytes}


@router.get("/submissions/{submission_id}", response_model=SubmissionOut)
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
        "runs": [
            {
                "id": r.id,
                "state": r.state.value,
                "error_class": r.error_class.value if r.error_class else None,
                "score": r.score,
                "reason": r.reason,
                "created_at": r.created_at,
            }
            for r in sub.runs
        ],
    }


@router.post(
    "/submissions/{submission_id}/regrade",
    status_code=status.HTTP_201_CREATED,
    response_model=Accepted,
    summary="Grade the same upload again as a new run (history is kept)",
)
def regrade_submission(submission_id: int, ctx: Context, session: DB, caller: Caller) -> dict[str, Any]:
    require(caller, SCOPE_REGRADE)
    sub = _readable_submission(session, caller, submission_id)
    run = record_regrade(session, sub)
    session.commit()
    return _acceptance(ctx, sub, run)


@router.get("/runs/{run_id}", response_model=RunOut)
def read_run(run_id: int, session: DB, caller: Caller) -> dict[str, Any]:
    require(caller, SCOPE_READ)
    run = session.get(Run, run_id)
    if run is None or not caller.can_read_submission_of(run.submission.user_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id}")
    return run_to_dict(run)


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
