"""The upload pages: the start page's form, the logged-in upload (`/submit`: session and CSRF
token checked before the file is read) and the older API-token form (`/upload`, logged out:
authenticated by the token typed into the form, not by a cookie, so it needs no CSRF token)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from grader.accepting import AcceptedUpload, accept_upload
from grader.api.deps import get_context
from grader.auth.audit import Via
from grader.auth.client_address import request_address
from grader.auth.credentials import SCOPE_SUBMIT
from grader.auth.logins import TokenDoor
from grader.auth.sessions import CSRF_FIELD, CsrfError, check_csrf, current_user
from grader.auth.throttle import Block, refusal_words
from grader.course.grade_reads import upload_windows
from grader.course.membership import assignments_of
from grader.db import session_scope
from grader.models import Assignment, GpuCalibration, User, utcnow
from grader.pages.common import CSRF_MESSAGE, Db, PageDenied, nav_for, page, see_other
from grader.storage.uploads import UploadError, receive_upload
from worker.rubric import Problem, RubricError, load_rubric

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Grading:
    """What an assignment grades, shown before uploading: the files looked for, each problem's
    points and speed thresholds, and the targets calibrated per GPU model that replace the
    rubric's there (problem id -> speedup)."""

    slug: str
    title: str
    required_files: tuple[str, ...]
    problems: tuple[Problem, ...]
    calibrated: dict[str, dict[str, float]]

    @property
    def points(self) -> float:
        return sum(p.points for p in self.problems)


def _gradings(session: Session, slugs: list[str], search: Sequence[Path]) -> list[Grading]:
    """The rubric of each assignment that has one (an assignment without a rubric shows none),
    found along `search` (the settings' rubric_dirs) after rubrics/."""
    shown = []
    for slug in slugs:
        try:
            rubric = load_rubric(slug, search=search)
        except RubricError:
            continue
        rows = session.scalars(select(GpuCalibration).join(Assignment, GpuCalibration.assignment_id == Assignment.id)
                               .where(Assignment.slug == slug).order_by(GpuCalibration.gpu_name))
        shown.append(Grading(slug, rubric.title, rubric.required_files, rubric.problems,
                             {row.gpu_name: {k: float(v) for k, v in row.targets.items()} for row in rows}))
    return shown


def assignment_label(assignment: Assignment) -> str:
    """An assignment as a student picks it: its course and title, then the slug the API and the
    CLI take ("GPU Programming: Homework 4 (hw4)"); a student in two courses tells them apart."""
    course = f"{assignment.course.title}: " if assignment.course is not None else ""
    return f"{course}{assignment.title} ({assignment.slug})"


def upload_page(request: Request, session: Session, user: User | None, status_code: int = 200,
                error: str | None = None) -> HTMLResponse:
    """The upload form; a logged-in user chooses among the assignments they are enrolled in
    (each by its course and title; the form sends the slug), and sees what each grades before
    sending anything."""
    settings = get_context(request).settings
    enrolled = assignments_of(session, user.id) if user is not None else []
    slugs = [a.slug for a in enrolled] if user is not None else settings.rubrics
    windows = upload_windows(session, settings, user, enrolled, utcnow()) if user is not None else {}
    return page(request, "upload.html", user, status_code, error=error, assignments=slugs, windows=windows,
                labels={a.slug: assignment_label(a) for a in enrolled},
                gradings=_gradings(session, slugs, settings.rubric_dirs) if user is not None else [],
                max_bytes=settings.max_upload_bytes, max_mib=f"{settings.max_upload_bytes / (1024 * 1024):g}")


@router.get("/", response_class=HTMLResponse)
def home(request: Request, session: Db) -> Response:
    """The upload page; staff who are a student nowhere land on their own pages instead (Nav.home)."""
    user = current_user(request, session)
    home = nav_for(session, user).home if user is not None else None
    return see_other(home) if home is not None else upload_page(request, session, user)


@router.post("/submit", response_class=HTMLResponse)
async def submit_from_session(request: Request) -> Response:
    """The logged-in upload: session and CSRF token are checked before the file is read, so it
    takes no page dependency (those would read the whole form first)."""
    ctx = get_context(request)
    holder: dict[str, int] = {}

    def check_fields(fields: dict[str, str]) -> None:
        with session_scope(ctx.sessions) as session:
            user = current_user(request, session)
            if user is None:
                raise UploadError(401, "Your session has ended; log in again.")
            holder["user_id"] = user.id
        try:
            check_csrf(request, fields.get(CSRF_FIELD))
        except CsrfError:
            raise UploadError(403, CSRF_MESSAGE) from None

    try:
        async with receive_upload(request, ctx, before_file=check_fields) as upload:
            accepted = await run_in_threadpool(accept_upload, ctx, holder["user_id"], upload)
    except UploadError as exc:
        if exc.status_code == status.HTTP_503_SERVICE_UNAVAILABLE:
            # The commit failed, the database may still be down: a page that needs no query
            return page(request, "upload_result.html", None, exc.status_code, error=exc.message)
        with session_scope(ctx.sessions) as session:
            user = current_user(request, session)
            if user is None:  # the session ended before the file was read: say so, it must be chosen again
                raise PageDenied("login", "upload") from None
            return upload_page(request, session, user, exc.status_code, exc.message)
    if not accepted.earlier:
        return see_other(f"/runs/{accepted.run.id}")
    # Say that it is the earlier upload, with a link to its run (stored: no query may fail this answer)
    return _result_page(request, accepted)


@router.post("/upload", response_class=HTMLResponse)
async def upload_from_form(request: Request) -> HTMLResponse:
    """The API-token form (no login): the token field is sent before the file."""
    ctx = get_context(request)
    holder: dict[str, int] = {}

    door = TokenDoor(ctx.sessions, ctx.settings.throttle, request_address(request), Via.web)

    def authenticate_from_fields(fields: dict[str, str]) -> None:
        # The form sends the token field before the file, so nothing is stored for a stranger.
        # An address blocked by its invalid tokens is refused first (grader.auth.logins.TokenDoor).
        with session_scope(ctx.sessions) as session:
            checked = door.check(session, fields.get("token", "").strip())
        if isinstance(checked, Block):
            raise UploadError(429, refusal_words(checked, ctx.settings.course_zone),
                              retry_after_s=checked.retry_after_s())
        if checked is None or not checked.can(SCOPE_SUBMIT):
            raise UploadError(401, "That API token is not valid for submitting.")
        holder["user_id"] = checked.user.id

    try:
        async with receive_upload(request, ctx, before_file=authenticate_from_fields) as upload:
            accepted = await run_in_threadpool(accept_upload, ctx, holder["user_id"], upload)
    except UploadError as exc:
        response = page(request, "upload_result.html", None, exc.status_code, error=exc.message)
        if exc.retry_after_s is not None:
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    return _result_page(request, accepted)


def _result_page(request: Request, accepted: AcceptedUpload) -> HTMLResponse:
    """The stored upload (201), or the earlier one it repeats (200), with a link to its run."""
    return page(
        request, "upload_result.html", None, status.HTTP_200_OK if accepted.earlier else status.HTTP_201_CREATED,
        error=None, submission_id=accepted.submission.id, run_id=accepted.run.id,
        sha256=accepted.submission.sha256, message=accepted.message,
    )
