"""The roster page of a user who teaches: import students into an assignment they teach (CSV,
first passwords shown once; grader.roster) and issue one student a password reset link."""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from grader.api.deps import Context, get_context
from grader.models import User
from grader.pages.common import Db, Sender, Viewer, absent, default_slug, page, taught_assignment, taught_slugs
from grader.password_reset import RESET_PATH, issue_reset, may_issue_reset
from grader.roster import import_roster
from grader.service import find_user

router = APIRouter(include_in_schema=False)


def _roster_page(request: Request, session: Session, user: User, status_code: int = 200,
                 **values: Any) -> HTMLResponse:
    """The roster page of a user who teaches at least one assignment (it imports into one of
    those), else absent."""
    taught = taught_slugs(session, user)
    if not taught:
        raise absent("such page")
    values.setdefault("report", None)
    values.setdefault("error", None)
    values.setdefault("reset", None)
    values.setdefault("chosen", default_slug(request, taught))
    max_kib = f"{get_context(request).settings.roster_max_bytes / 1024:g}"
    return page(request, "roster.html", user, status_code, max_kib=max_kib, assignments=taught, **values)


@router.get("/roster", response_class=HTMLResponse)
def roster_form(request: Request, session: Db, user: Viewer) -> Response:
    return _roster_page(request, session, user)


async def _roster_text(form: Any, limit: int) -> str:
    """The CSV from the file field, else (no file, or an empty one) from the text area;
    ValueError says what is wrong."""
    upload = form.get("file")
    data = await upload.read(limit + 1) if upload is not None and not isinstance(upload, str) else b""
    if not data:
        data = str(form.get("text") or "").encode()
        upload = None
    name = f"“{upload.filename}”" if upload is not None else "The pasted roster"
    if len(data) > limit:
        raise ValueError(f"{name} is larger than {limit / 1024:g} KiB.")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name} is not UTF-8 text; save the roster as CSV (UTF-8).") from None


@router.post("/roster", response_class=HTMLResponse)
async def roster_import(request: Request, ctx: Context, session: Db, user: Sender) -> Response:
    form = await request.form()
    slug = str(form.get("assignment") or default_slug(request, taught_slugs(session, user)))
    assignment = taught_assignment(session, user, slug)
    try:
        text = await _roster_text(form, ctx.settings.roster_max_bytes)
    except ValueError as exc:
        return _roster_page(request, session, user, status.HTTP_400_BAD_REQUEST, error=str(exc),
                            chosen=assignment.slug)
    if not text.strip():
        return _roster_page(request, session, user, status.HTTP_400_BAD_REQUEST, chosen=assignment.slug,
                            error="Choose a CSV file or paste the roster (email,name[,section] per line).")
    report = import_roster(session, text, assignment)
    response = _roster_page(request, session, user, status.HTTP_200_OK, report=report, chosen=assignment.slug)
    response.headers["Cache-Control"] = "no-store"  # first passwords are shown once
    return response


@router.post("/roster/reset-link", response_class=HTMLResponse)
async def roster_reset_link(request: Request, ctx: Context, session: Db, user: Sender) -> Response:
    """Issues a one-time password reset link for a student of an assignment the user teaches
    and shows it once on the roster page (grader.password_reset)."""
    form = await request.form()
    username = str(form.get("username", "")).strip()
    target = find_user(session, username)
    if target is None or not may_issue_reset(session, user, target):
        return _roster_page(request, session, user, status.HTTP_404_NOT_FOUND,
                            error=f"No student “{username}” in an assignment you teach.")
    token = issue_reset(session, target, ctx.settings.password_reset_max_age_s, issued_by=user)
    link = str(request.base_url).rstrip("/") + RESET_PATH + token
    response = _roster_page(request, session, user, reset={"username": target.username, "link": link,
                                                           "hours": ctx.settings.password_reset_max_age_s / 3600})
    response.headers["Cache-Control"] = "no-store"  # the link is shown once
    return response
