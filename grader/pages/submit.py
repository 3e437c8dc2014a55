"""The upload pages: the start page's form, the logged-in upload (`/submit`: session and CSRF
token checked before the file is read) and the older API-token form (`/upload`, logged out:
authenticated by the token typed into the form, not by a cookie, so it needs no CSRF token)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.api.acceptance import admission_message, admit_committed
from grader.api.deps import get_context
from grader.auth import SCOPE_SUBMIT, authenticate
from grader.context import AppContext
from grader.course_ops import admission
from grader.db import session_scope
from grader.grade_reads import upload_windows
from grader.membership import assignments_of
from grader.models import Assignment, GpuCalibration, RunState, User, utcnow
from grader.pages.common import CSRF_MESSAGE, Db, PageDenied, page, see_other
from grader.service import CommitUncertain, NotFound, Recorded, commit_upload, get_assignment, record_upload
from grader.uploads import ReceivedUpload, UploadError, earlier_upload_message, maybe_stored_message, receive_upload
from grader.websession import CSRF_FIELD, CsrfError, check_csrf, current_user
from worker.assignment import AssignmentError, assignment_of
from worker.rubric import Problem, RubricError, load_rubric
from worker.unpack import HEAD_BYTES, not_a_zip

router = APIRouter(include_in_schema=False)

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header, or an empty archive's end record


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


def _gradings(session: Session, slugs: list[str]) -> list[Grading]:
    """The rubric of each assignment that has one (an assignment without a rubric shows none)."""
    shown = []
    for slug in slugs:
        try:
            rubric = load_rubric(slug)
        except RubricError:
            continue
        rows = session.scalars(select(GpuCalibration).join(Assignment, GpuCalibration.assignment_id == Assignment.id)
                               .where(Assignment.slug == slug).order_by(GpuCalibration.gpu_name))
        shown.append(Grading(slug, rubric.title, rubric.required_files, rubric.problems,
                             {row.gpu_name: {k: float(v) for k, v in row.targets.items()} for row in rows}))
    return shown


def upload_page(request: Request, session: Session, user: User | None, status_code: int = 200,
                error: str | None = None) -> HTMLResponse:
    """The upload form; a logged-in user chooses among the assignments they are enrolled in,
    and sees what each grades before sending anything."""
    settings = get_context(request).settings
    enrolled = assignments_of(session, user.id) if user is not None else []
    slugs = [a.slug for a in enrolled] if user is not None else settings.rubrics
    windows = upload_windows(session, settings, user, enrolled, utcnow()) if user is not None else {}
    return page(request, "upload.html", user, status_code, error=error, assignments=slugs, windows=windows,
                gradings=_gradings(session, slugs) if user is not None else [],
                max_bytes=settings.max_upload_bytes, max_mib=f"{settings.max_upload_bytes / (1024 * 1024):g}")


@router.get("/", response_class=HTMLResponse)
def home(request: Request, session: Db) -> HTMLResponse:
    return upload_page(request, session, current_user(request, session))


@router.post("/submit", response_class=HTMLResponse)
async def submit_from_session(request: Request) -> Response:
    """The logged-in upload: session and CSRF token are checked before the file is read, so it
    takes no page dependency (those would read the whole form first)."""
    ctx = get_context(request)
    holder: dict[str, Any] = {}

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

    error: tuple[int, str] | None = None
    try:
        async with receive_upload(request, ctx, before_file=check_fields) as upload:
            with ctx.blobs.path(upload.blob.sha256).open("rb") as fh:
                head = fh.read(HEAD_BYTES)
                if head[:4] not in ZIP_MAGIC:
                    slug = upload.fields.get("assignment", ctx.default_assignment)
                    raise UploadError(415, f"“{upload.filename}” {not_a_zip(head)}. {_zip_hint(slug)}")
            recorded = _record_form_upload(ctx, upload, holder["user_id"])
    except UploadError as exc:
        error = (exc.status_code, exc.message)
    except NotFound as exc:
        error = (status.HTTP_404_NOT_FOUND, str(exc))
    if error is not None and error[0] == status.HTTP_503_SERVICE_UNAVAILABLE:
        # The commit failed, the database may still be down: a page that needs no query
        return page(request, "upload_result.html", None, error[0], error=error[1])
    if error is not None:
        with session_scope(ctx.sessions) as session:
            user = current_user(request, session)
            if user is None:  # the session ended before the file was read: say so, it must be chosen again
                raise PageDenied("login", "upload")
            return upload_page(request, session, user, error[0], error[1])
    message = _admit_form_upload(ctx, recorded)
    if not recorded.earlier:
        return see_other(f"/runs/{recorded.run.id}")
    # Say that it is the earlier upload, with a link to its run (stored: no query may fail this answer)
    return page(request, "upload_result.html", None, status.HTTP_200_OK, error=None,
                submission_id=recorded.submission.id, run_id=recorded.run.id,
                sha256=recorded.submission.sha256, message=message)


def _zip_hint(slug: str) -> str:
    """How to make the zip, with the folder name of the assignment's starter where it has one."""
    try:
        folder = assignment_of(load_rubric(slug)).zip_folder
    except (RubricError, AssignmentError):
        return "Zip your assignment folder and upload the .zip file."
    return f"Zip your assignment folder (for example: zip -r {folder}.zip {folder}) and upload the .zip file."


def _refuse_if_not_admitted(ctx: AppContext, session: Session, user: User, assignment: Assignment) -> None:
    """The course schedule and the run quota, as for API uploads (grader.course_ops.admission)."""
    refusal = admission(session, ctx.settings, user, assignment, utcnow())
    if refusal is not None:
        raise UploadError(refusal.status_code, refusal.message)


def _record_form_upload(ctx: AppContext, upload: ReceivedUpload, user_id: int) -> Recorded:
    """Record a form upload, or find the earlier one it repeats (the same file within the
    re-send window: browsers send no Idempotency-Key). A failed commit may have stored it."""
    with session_scope(ctx.sessions) as session:
        assignment = get_assignment(session, upload.fields.get("assignment", ctx.default_assignment))
        user = session.get(User, user_id)
        assert user is not None
        recorded = record_upload(session, user, assignment, upload.filename, upload.blob, None,
                                 ctx.settings.upload_dedup_window_s,
                                 lambda: _refuse_if_not_admitted(ctx, session, user, assignment))
        try:
            commit_upload(session)
        except CommitUncertain as exc:
            raise UploadError(status.HTTP_503_SERVICE_UNAVAILABLE,
                              maybe_stored_message(ctx.settings.upload_dedup_window_s, keyed=False)) from exc
        return recorded  # its rows stay loaded after the session closes (expire_on_commit=False)


def _admit_form_upload(ctx: AppContext, recorded: Recorded) -> str:
    """Send the upload's run (a repeat's only if it never was sent); the answer's message."""
    run = recorded.run
    if recorded.earlier and not (run.state is RunState.queued and run.enqueued_at is None):
        return earlier_upload_message(recorded.submission.id, run.id)
    message = admission_message(admit_committed(ctx, run.id))
    return f"{earlier_upload_message(recorded.submission.id, run.id)} {message}" if recorded.earlier else message


@router.post("/upload", response_class=HTMLResponse)
async def upload_from_form(request: Request) -> HTMLResponse:
    """The API-token form (no login): the token field is sent before the file."""
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
        async with receive_upload(request, ctx, before_file=authenticate_from_fields) as upload:
            recorded = _record_form_upload(ctx, upload, principal_holder["user_id"])
    except (UploadError, NotFound) as exc:
        code = exc.status_code if isinstance(exc, UploadError) else status.HTTP_404_NOT_FOUND
        message = exc.message if isinstance(exc, UploadError) else str(exc)
        return page(request, "upload_result.html", None, code, error=message)
    return page(
        request, "upload_result.html", None, status.HTTP_200_OK if recorded.earlier else status.HTTP_201_CREATED,
        error=None, submission_id=recorded.submission.id, run_id=recorded.run.id,
        sha256=recorded.submission.sha256, message=_admit_form_upload(ctx, recorded),
    )
