"""The staff's similarity pages of an assignment: the ranked report, the background job that
computes it (started here, followed through a small JSON status, grader.similarity_jobs), the
base it is computed against (set on the settings page, kept by grader.similarity_base) and a
pair's side-by-side view.

Staff checks and CSRF are grader.web_ops's (someone who is not staff of the assignment gets
the 404 page).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from fastapi import APIRouter, Request, status
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from grader.context import AppContext
from grader.models import Assignment, User
from grader.runs.engine_config import pipeline_config
from grader.similarity_base import UPLOAD, describe_assignment_base, parse_git_spec, save_base
from grader.similarity_jobs import latest_job, start_job, view
from grader.similarity_report import describe_ranges, numbered_lines, starter_lines
from grader.similarity_store import load_base_files, load_report, pair_sources, report_path
from grader.web import _db, _page, _see_other, get_context
from grader.web_ops import _staff, _staff_form
from worker.rubric import RubricError, load_rubric
from worker.unpack import BadArchive

router = APIRouter(include_in_schema=False)

SHOWN_PAIRS = 100  # pairs per page of the similarity ranking (every pair is on some page)


@dataclass(frozen=True)
class _Staff:
    """A GET by the assignment's staff: the app, its database session, who and which assignment."""

    ctx: AppContext
    session: Session
    user: User
    assignment: Assignment


def _as_staff(request: Request, slug: str, show: Callable[[_Staff], Response]) -> Response:
    """`show`'s answer when the logged-in user is staff of `slug` (within one database session),
    else the login page or the 404 page."""
    ctx = get_context(request)
    with _db(ctx) as session:
        found = _staff(request, session, slug)
        return found if isinstance(found, Response) else show(_Staff(ctx, session, *found))


@router.get("/assignments/{slug}/similarity", response_class=HTMLResponse)
def similarity_page(request: Request, slug: str, page: int = 1) -> Response:
    return _as_staff(request, slug, lambda staff: _ranking(request, staff, page))


def _ranking(request: Request, staff: _Staff, page: int) -> Response:
    slug = staff.assignment.slug
    job = latest_job(staff.session, staff.assignment, staff.ctx.settings)
    report = load_report(report_path(staff.ctx.settings.data_dir, slug))
    pages = max(1, -(-len(report.pairs) // SHOWN_PAIRS)) if report else 1
    page = min(max(page, 1), pages)
    return _page(request, "ops_similarity.html", staff.user, assignment=staff.assignment, report=report, page=page,
                 pages=pages, first=(page - 1) * SHOWN_PAIRS,
                 pairs=report.pairs[(page - 1) * SHOWN_PAIRS: page * SHOWN_PAIRS] if report else [],
                 job=view(job) if job else None, base=describe_assignment_base(staff.assignment.similarity_base, slug))


@router.get("/assignments/{slug}/similarity/job.json")
def similarity_job_status(request: Request, slug: str) -> Response:
    """The newest job: state, files fingerprinted of those to fingerprint, base, error."""
    return _as_staff(request, slug, _job_status)


def _job_status(staff: _Staff) -> Response:
    job = latest_job(staff.session, staff.assignment, staff.ctx.settings)
    return JSONResponse(view(job).as_json() if job else {"state": None, "final": True})


@router.get("/assignments/{slug}/similarity.json")
def similarity_download(request: Request, slug: str) -> Response:
    """The stored report as computed (every pair, the zips compared, who was left out and why)."""
    return _as_staff(request, slug, lambda staff: _download(request, staff))


def _download(request: Request, staff: _Staff) -> Response:
    slug = staff.assignment.slug
    path = report_path(staff.ctx.settings.data_dir, slug)
    if not path.is_file():
        return _page(request, "error.html", staff.user, status.HTTP_404_NOT_FOUND, title="No report",
                     message=f"No similarity report of {slug} was computed yet.")
    return FileResponse(path, media_type="application/json", filename=f"similarity-{slug}.json")


@router.post("/assignments/{slug}/similarity", response_class=HTMLResponse)
async def similarity_compute(request: Request, slug: str) -> Response:
    """Start computing the report in the background (or follow the job already under way)."""
    ctx = get_context(request)
    with _db(ctx) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        user, assignment, _form = found
        try:
            load_rubric(slug)
        except RubricError as exc:
            return _page(request, "error.html", user, status.HTTP_404_NOT_FOUND, title="No rubric",
                         message=f"Assignment {slug} has no rubric to compare submissions by: {exc}")
        await run_in_threadpool(start_job, session, ctx.celery, ctx.settings, assignment, user)
    return _see_other(f"/assignments/{slug}/similarity")


@router.post("/assignments/{slug}/similarity/base", response_class=HTMLResponse)
async def similarity_base(request: Request, slug: str) -> Response:
    """Set the starter the assignment's students received (the base): a zip, kept; a git ref;
    or back to the rubric's default. Answers on the settings page."""
    ctx = get_context(request)
    done = f"/assignments/{slug}/settings?base="
    with _db(ctx) as session:
        found = await _staff_form(request, session, slug)
        if isinstance(found, Response):
            return found
        assignment, form = found[1], found[2]
        upload, git = form.get("starter"), str(form.get("git", "")).strip()
        if form.get("action") == "default":
            assignment.similarity_base = None
            return _see_other(done + quote("The base is the rubric's default again; compute the report again."))
        if git:
            try:
                parse_git_spec(git)
            except BadArchive as exc:
                return _see_other(done + quote(f"Not kept: {exc}"))
            assignment.similarity_base = git
            return _see_other(done + quote(f"The base is {git}; compute the report again."))
        if upload is None or isinstance(upload, str) or not upload.filename:
            return _see_other(done + quote("Choose the starter zip or give a git ref first."))
        rubric = load_rubric(slug)
        try:
            count = await run_in_threadpool(save_base, ctx.settings.data_dir, slug, await upload.read(), rubric,
                                            pipeline_config(ctx.settings, rubric).limits)
        except BadArchive as exc:
            return _see_other(done + quote(f"Not kept: {exc}"))
        assignment.similarity_base = UPLOAD
    return _see_other(done + quote(f"Kept: {count} starter files; compute the report again."))


@router.get("/assignments/{slug}/similarity/pair", response_class=HTMLResponse)
def similarity_pair(request: Request, slug: str, a: str = "", b: str = "") -> Response:
    """The two students' files side by side, shared regions highlighted (from the stored report)."""
    return _as_staff(request, slug, lambda staff: _pair_view(request, staff, a, b))


def _pair_view(request: Request, staff: _Staff, a: str, b: str) -> Response:
    slug, settings = staff.assignment.slug, staff.ctx.settings
    path = report_path(settings.data_dir, slug)
    report = load_report(path)
    pair = report.pair(a, b) if report else None
    if report is None or pair is None:
        return _page(request, "error.html", staff.user, status.HTTP_404_NOT_FOUND, title="Not found",
                     message=f"No pair {a} and {b} in the stored similarity report of {slug}.")
    rubric = load_rubric(slug)
    try:
        sources = pair_sources(staff.ctx.blobs, report, pair, rubric, pipeline_config(settings, rubric).limits)
    except (BadArchive, FileNotFoundError) as exc:
        return _page(request, "error.html", staff.user, status.HTTP_404_NOT_FOUND, title="Submission unavailable",
                     message=f"A compared zip can no longer be read ({exc}); compute the report again.")
    base = load_base_files(path)
    files = [{"match": match,
              "a": numbered_lines(sources[pair.a].get(match.path_a, ""), match.lines_a, starter_lines(base, match.path_a)),
              "b": numbered_lines(sources[pair.b].get(match.path_b, ""), match.lines_b, starter_lines(base, match.path_b)),
              "ranges_a": describe_ranges(match.lines_a), "ranges_b": describe_ranges(match.lines_b)}
             for match in pair.matches]
    return _page(request, "ops_pair.html", staff.user, assignment=staff.assignment, report=report, pair=pair,
                 files=files, rank=report.pairs.index(pair) + 1)
