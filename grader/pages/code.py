"""What was submitted: the code view of a submission (every file of its zip, the ones the grader
takes marked, one file shown read-only and highlighted: the one asked for, else the one that
matters most to its newest graded run, `files_that_matter`) and the zip itself, byte for byte as it
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
from grader.ids import RowId
from grader.models import Run, Submission, User
from grader.pages import highlight
from grader.pages.common import Db, absent, logged_in, page
from grader.roles import Power, may
from grader.runs.engine_config import pipeline_config
from grader.storage.submitted_zip import SHOWN_MAX_BYTES, Entry, Listing, Shown, list_zip, read_entry
from worker.build_isolation import first_compiler_error
from worker.rubric import Rubric, RubricError, load_rubric

router = APIRouter(include_in_schema=False)


def _shown_submission(request: Request, submission_id: RowId, session: Db) -> tuple[User, Submission]:
    """The logged-in user and a submission they may read (an id that is not one is the 404
    page before anyone is asked to log in, as on the run page)."""
    user = logged_in(request, session)
    sub = session.get(Submission, submission_id)
    if sub is None or not browser_principal(session, user).can_read_submission(sub):
        raise absent(f"submission {submission_id}")
    return user, sub


Readable = Annotated[tuple[User, Submission], Depends(_shown_submission)]


def files_that_matter(rubric: Rubric, run: Run | None) -> list[str]:
    """The rubric's files most worth opening first (paths in the assignment folder): the one
    the compiler's first error names in `run`'s build log, the kernel sources the run's failing
    problems need, then every kernel source. Kernels go from the assignment's own to those every
    problem needs (hw4: softmax, layernorm, then the combine.cu students bring from HW3)."""
    kernels = sorted(rubric.kernels, key=lambda k: sum(k.name in p.needs for p in rubric.problems))
    wanted = []
    if run is not None:
        error = first_compiler_error(str(((run.stages or {}).get("build") or {}).get("log") or ""))
        if error is not None and error.file is not None:
            wanted.append(error.file)
        lost = {r.problem_id for r in run.results if r.points < r.max_points and r.status != "not_run"}
        wanted += [k.source for p in rubric.problems if p.id in lost for k in kernels if k.name in p.needs]
    return wanted + [k.source for k in kernels]


def _chosen(listing: Listing, asked: str | None, wanted: list[str]) -> Entry | str | None:
    """The entry to show: the one asked for (its name in the zip, or its path in the assignment
    folder; the name alone when the zip has no such file), else the first of `wanted` the zip
    holds, else the first graded file."""
    if asked is not None:
        return listing.entry(asked) or listing.in_folder(asked) or asked
    found = (listing.in_folder(path) for path in wanted)
    return next((e for e in found if e is not None), listing.graded[0] if listing.graded else None)


def _listing(request: Request, sub: Submission) -> tuple[Listing, Rubric | None]:
    """The submission's zip as list_zip reads it under its assignment's rubric, and the rubric."""
    slug = sub.assignment.slug
    try:
        rubric = load_rubric(slug, search=get_context(request).settings.rubric_dirs)
    except RubricError:  # which files count is the rubric's to say
        return Listing([], 0, f"The assignment {slug} has no rubric that can be read, so this page does not "
                              "open the zip; download it to look inside.", None), None
    try:
        return list_zip(get_context(request).blobs.path(sub.sha256), rubric,
                        pipeline_config(get_context(request).settings, rubric).limits), rubric
    except FileNotFoundError:
        raise absent(f"stored zip of submission {sub.id} (it was removed)") from None


@router.get("/submissions/{submission_id}/code", response_class=HTMLResponse)
def code_page(request: Request, session: Db, shown: Readable, file: str | None = None) -> Response:
    user, sub = shown
    settings = get_context(request).settings
    path = get_context(request).blobs.path(sub.sha256)
    listing, rubric = _listing(request, sub)
    graded = [run for run in sub.runs if run.stages]  # oldest first
    entry = _chosen(listing, file, files_that_matter(rubric, graded[-1] if graded else None) if rubric else [])
    if isinstance(entry, str):
        raise absent(f"readable file {entry!r} in submission {sub.id}")
    opened: Shown | None = read_entry(path, entry) if entry else None
    lines = highlight.highlight(opened.text, opened.name) if opened and opened.text is not None else []
    teaches = may(role_in(session, user.id, sub.assignment_id), Power.view)
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
