"""The gradebook's bulk paths, for when grading by hand is the way (a GPU outage): every
student's upload of an assignment as one zip with a manifest (grader.reads.submission_archive),
and manual grades and adjustments imported from a CSV (grader.course.grade_import) after a
preview that lists each line's effect and each refused line."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request, status
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from grader.api.bulk import archive_response
from grader.api.deps import Context
from grader.course.grade_import import MAX_BYTES, GradeImport, import_entries
from grader.models import User
from grader.notify import answer_messages, send_quietly
from grader.pages.common import Db, Sender, Viewer, absent, page, see_other, staff_assignment
from grader.reads import submission_archive
from grader.reads.gradebook_reads import POLICIES
from grader.roles import Power

router = APIRouter(include_in_schema=False)
CHANGED = ("A grade in the file changed since the preview was shown (another entry, a new run); check the "
           "new preview and apply again.")


@router.get("/gradebook/submissions.zip")
def submissions_zip(request: Request, session: Db, user: Viewer) -> Response:
    """Every student's counted upload (`which=counted`, the gradebook's `policy`) or latest one
    (`which=latest`) of the assignment, with manifest.csv; for its course's staff."""
    params = request.query_params
    assignment = staff_assignment(session, user, params.get("assignment", ""), Power.view)
    which, policy = params.get("which", "counted"), params.get("policy") or None
    if which not in submission_archive.WHICH or policy not in (None, *POLICIES):
        raise absent(f"uploads {which!r} by policy {policy!r} (counted or latest; latest or best)")
    return archive_response(request, session, assignment, which, policy)  # type: ignore[arg-type]


def _import_page(request: Request, user: User, slug: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    for name in ("error", "preview", "notice", "applied"):
        values.setdefault(name, None)
    values.setdefault("text", "")
    return page(request, "grade_import.html", user, status_code, slug=slug, max_kib=f"{MAX_BYTES / 1024:g}",
                **values)


@router.get("/gradebook/import", response_class=HTMLResponse)
def import_form(request: Request, session: Db, user: Viewer) -> Response:
    """The import's form (and, after applying, how many entries were)."""
    assignment = staff_assignment(session, user, request.query_params.get("assignment", ""), Power.grade)
    applied = request.query_params.get("applied", "")
    return _import_page(request, user, assignment.slug, applied=int(applied) if applied.isdigit() else None)


async def _import_text(form: Any) -> str:
    """The CSV from the file field, else (no file, or an empty one) from the text area;
    ValueError says what is wrong."""
    upload = form.get("file")
    data = await upload.read(MAX_BYTES + 1) if upload is not None and not isinstance(upload, str) else b""
    data = data or str(form.get("text") or "").encode()
    if len(data) > MAX_BYTES:
        raise ValueError(f"The file is larger than {MAX_BYTES / 1024:g} KiB.")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("The file is not UTF-8 text; save it as CSV (UTF-8).") from None
    if not text.strip():
        raise ValueError("Choose a CSV file or paste one (login,kind,points,reason).")
    return text


@router.post("/gradebook/import", response_class=HTMLResponse)
async def import_grades(request: Request, background: BackgroundTasks, ctx: Context, session: Db,
                        user: Sender) -> Response:
    """The preview of the file sent; with the preview's `expect` (its confirmation) and the same
    effects now, every entry applied in one transaction, the answered students mailed."""
    form = await request.form()
    assignment = staff_assignment(session, user, str(form.get("assignment") or ""), Power.grade)
    try:
        text = await _import_text(form)
    except ValueError as exc:
        return _import_page(request, user, assignment.slug, status.HTTP_400_BAD_REQUEST, error=str(exc))
    preview: GradeImport = await run_in_threadpool(import_entries, session, assignment, user, text)
    expect = form.get("expect")
    if expect is None or preview.errors or not preview.effects or expect != preview.digest:
        code = status.HTTP_400_BAD_REQUEST if preview.errors else \
            status.HTTP_409_CONFLICT if expect is not None else status.HTTP_200_OK
        return _import_page(request, user, assignment.slug, code, preview=preview, text=text,
                            notice=CHANGED if expect is not None and not preview.errors else None)
    done = await run_in_threadpool(import_entries, session, assignment, user, text, True)
    if not done.applied:  # refused in between (a grade taken back by someone else): show why
        return _import_page(request, user, assignment.slug, status.HTTP_409_CONFLICT, preview=done, text=text,
                            notice=CHANGED)
    mail = answer_messages(ctx.settings, done.answered)
    session.commit()
    background.add_task(send_quietly, ctx.settings.smtp, mail)
    return see_other(f"/gradebook/import?assignment={assignment.slug}&applied={len(done.effects)}")
