"""Plain HTML pages: the upload form posts the same streamed multipart as the API."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from grader.api import BROKER_DOWN_MESSAGE, QUEUED_MESSAGE, get_context
from grader.auth import SCOPE_SUBMIT, authenticate
from grader.db import session_scope
from grader.dispatch import send_run
from grader.models import User
from grader.service import NotFound, get_assignment, record_submission
from grader.uploads import UploadError, receive_upload

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


@router.get("/", response_class=HTMLResponse)
def upload_form(request: Request) -> HTMLResponse:
    ctx = get_context(request)
    return templates.TemplateResponse(
        request,
        "upload.html",
        {"max_mib": ctx.settings.max_upload_bytes // (1024 * 1024), "assignments": ctx.settings.rubrics},
    )


@router.post("/upload", response_class=HTMLResponse)
async def upload_from_form(request: Request) -> HTMLResponse:
    ctx = get_context(request)
    principal_holder: dict[str, Any] = {}

    def authenticate_from_fields(fields: dict[str, str]) -> None:
        # The form sends the token field before the file, so nothing is stored for a stranger.
        with session_scope(ctx.sessions) as session:
            principal = authenticate(session, fields.get("token", "").strip())
            if principal is None or not principal.can(SCOPE_SUBMIT):
                raise UploadError(401, "That API token is not valid for submitting.")
            principal_holder["user_id"] = principal.user.id

    try:
        upload = await receive_upload(
            request, ctx.blobs, ctx.settings.max_upload_bytes, before_file=authenticate_from_fields
        )
        with session_scope(ctx.sessions) as session:
            assignment = get_assignment(session, upload.fields.get("assignment", ctx.default_assignment))
            user = session.get(User, principal_holder["user_id"])
            assert user is not None
            submission, run = record_submission(session, user, assignment, upload.filename, upload.blob)
    except (UploadError, NotFound) as exc:
        code = exc.status_code if isinstance(exc, UploadError) else status.HTTP_404_NOT_FOUND
        message = exc.message if isinstance(exc, UploadError) else str(exc)
        return templates.TemplateResponse(
            request, "upload_result.html", {"error": message}, status_code=code
        )
    queued = send_run(ctx.celery, ctx.sessions, run.id, ctx.settings.task_queue)
    return templates.TemplateResponse(
        request,
        "upload_result.html",
        {
            "error": None,
            "submission_id": submission.id,
            "run_id": run.id,
            "sha256": submission.sha256,
            "message": QUEUED_MESSAGE if queued else BROKER_DOWN_MESSAGE,
        },
        status_code=status.HTTP_201_CREATED,
    )
