"""What was submitted: the code view of a submission (every file of its zip, the ones the grader
takes marked, one file shown read-only and highlighted) and the zip itself, byte for byte as it
was uploaded. The owner and the staff of its assignment may see them; anyone else gets the 404
page, as for a run (grader.auth.credentials's browser principal)."""
from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from grader.api.deps import get_context
from grader.auth.credentials import browser_principal
from grader.course.membership import role_in
from grader.models import CourseRole, Submission, User
from grader.pages import highlight
from grader.pages.common import Db, absent, logged_in, page
from grader.runs.engine_config import pipeline_config
from grader.storage.submitted_zip import SHOWN_MAX_BYTES, Listing, Shown, list_zip, read_entry
from worker.rubric import RubricError, load_rubric

router = APIRouter(include_in_schema=False)


def _shown_submission(request: Request, submission_id: int, session: Db) -> tuple[User, Submission]:
    """The logged-in user and a submission they may read (an id that is not one is the 404
    page before anyone is asked to log in, as on the run page)."""
    user = logged_in(request, session)
    sub = session.get(Submission, submission_id)
    if sub is None or not browser_principal(session, user).can_read_submission(sub):
        raise absent(f"submission {submission_id}")
    return user, sub


Readable = Annotated[tuple[User, Submission], Depends(_shown_submission)]


def _chosen(listing: Listing, asked: str | None) -> str | None:
    """The entry to show: the one asked for, else the first graded file."""
    if asked is not None:
        return asked
    return listing.graded[0].name if listing.graded else None


def _listing(request: Request, sub: Submission) -> Listing:
    """The submission's zip as list_zip reads it under its assignment's rubric."""
    slug = sub.assignment.slug
    try:
        rubric = load_rubric(slug, search=get_context(request).settings.rubric_dirs)
    except RubricError:  # which files count is the rubric's to say
        return Listing([], 0, f"The assignment {slug} has no rubric that can be read, so this page does not "
                              "open the zip; download it to look inside.", None)
    try:
        return list_zip(get_context(request).blobs.path(sub.sha256), rubric,
                        pipeline_config(get_context(request).settings, rubric).limits)
    except FileNotFoundError:
        raise absent(f"stored zip of submission {sub.id} (it was removed)") from None


@router.get("/submissions/{submission_id}/code", response_class=HTMLResponse)
def code_page(request: Request, session: Db, shown: Readable, file: str | None = None) -> Response:
    user, sub = shown
    settings = get_context(request).settings
    path = get_context(request).blobs.path(sub.sha256)
    listing = _listing(request, sub)
    name = _chosen(listing, file)
    entry = listing.entry(name) if name is not None else None
    if name is not None and entry is None:
        raise absent(f"readable file {name!r} in submission {sub.id}")
    opened: Shown | None = read_entry(path, entry) if entry else None
    lines = highlight.highlight(opened.text, opened.name) if opened and opened.text is not None else []
    teaches = role_in(session, user.id, sub.assignment_id) is CourseRole.staff
    history = f"/assignments/{sub.assignment.slug}/students/{quote(sub.user.username, safe='')}" if teaches else None
    return page(request, "submission_code.html", user, sub=sub, listing=listing, opened=opened, lines=lines,
                language=highlight.language(opened.name) if opened else None, cap_kib=SHOWN_MAX_BYTES // 1024,
                zone=settings.course_zone, history=history)


@router.get("/submissions/{submission_id}/download")
def download(request: Request, shown: Readable) -> Response:
    """The zip as uploaded, under the name it was uploaded with (its last part)."""
    _user, sub = shown
    path = get_context(request).blobs.path(sub.sha256)
    if not path.is_file():
        raise absent(f"stored zip of submission {sub.id} (it was removed)")
    filename = PurePosixPath(sub.original_filename.replace("\\", "/")).name or f"submission-{sub.id}.zip"
    # Starlette quotes the name (RFC 5987) when it holds anything but plain characters.
    return FileResponse(path, media_type="application/zip", filename=filename,
                        headers={"Cache-Control": "private, no-store"})
