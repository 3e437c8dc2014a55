"""The staff's similarity pages of an assignment: the ranked report, the background job that
computes it (started here, followed through a small JSON status, grader.similarity.jobs) and a
pair's side-by-side view (the report names each known public solution a student matches), for the course's staff (instructors and TAs). The base it is computed
against is set on the settings page by an instructor (grader.pages.ops, kept by
grader.similarity.base). Someone outside the course gets the 404 page, its students a 403 page.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from grader.api.deps import Context
from grader.pages.common import Db, GraderForm, Staff, page, see_other
from grader.runs.engine_config import pipeline_config
from grader.similarity.base import describe_assignment_base, text_sha256
from grader.similarity.compare import LineRange
from grader.similarity.jobs import latest_job, start_job, view
from grader.similarity.public import entry_role_words
from grader.similarity.report import CLUSTER_NOTE, describe_ranges, numbered_lines, starter_lines
from grader.similarity.store import load_base_files, load_report, pair_sources, report_path
from worker.rubric import RubricError, load_rubric
from worker.unpack import BadArchive

router = APIRouter(include_in_schema=False)

SHOWN_PAIRS = 100  # pairs per page of the similarity ranking (every pair is on some page)


@router.get("/assignments/{slug}/similarity", response_class=HTMLResponse)
def similarity_page(request: Request, ctx: Context, session: Db, staff: Staff,
                    number: Annotated[int, Query(alias="page")] = 1) -> Response:
    slug = staff.assignment.slug
    job = latest_job(session, staff.assignment, ctx.settings)
    report = load_report(report_path(ctx.settings.data_dir, slug))
    pages = max(1, -(-len(report.pairs) // SHOWN_PAIRS)) if report else 1
    number = min(max(number, 1), pages)
    return page(request, "ops_similarity.html", staff.user, assignment=staff.assignment, report=report, page=number,
                pages=pages, first=(number - 1) * SHOWN_PAIRS,
                pairs=report.pairs[(number - 1) * SHOWN_PAIRS: number * SHOWN_PAIRS] if report else [],
                job=view(job) if job else None, base=describe_assignment_base(staff.assignment.similarity_base, slug, ctx.settings.rubric_dirs,
                                              ctx.settings.data_dir),
                zone=ctx.settings.course_zone, cluster_note=CLUSTER_NOTE,
                listed=[entry_role_words(e) for e in staff.assignment.similarity_sources or []])


@router.get("/assignments/{slug}/similarity/job.json")
def similarity_job_status(ctx: Context, session: Db, staff: Staff) -> Response:
    """The newest job: state, files fingerprinted of those to fingerprint, base, error."""
    job = latest_job(session, staff.assignment, ctx.settings)
    return JSONResponse(view(job).as_json() if job else {"state": None, "final": True})


@router.get("/assignments/{slug}/similarity.json")
def similarity_download(request: Request, ctx: Context, staff: Staff) -> Response:
    """The stored report as computed (every pair, the zips compared, who was left out and why)."""
    slug = staff.assignment.slug
    path = report_path(ctx.settings.data_dir, slug)
    if not path.is_file():
        return page(request, "error.html", staff.user, status.HTTP_404_NOT_FOUND, title="No report",
                    message=f"No similarity report of {slug} was computed yet.")
    return FileResponse(path, media_type="application/json", filename=f"similarity-{slug}.json")


@router.post("/assignments/{slug}/similarity", response_class=HTMLResponse)
async def similarity_compute(request: Request, slug: str, ctx: Context, session: Db, staff: GraderForm) -> Response:
    """Start computing the report in the background (or follow the job already under way)."""
    try:
        load_rubric(slug, search=ctx.settings.rubric_dirs)
    except RubricError as exc:
        return page(request, "error.html", staff.user, status.HTTP_404_NOT_FOUND, title="No rubric",
                    message=f"Assignment {slug} has no rubric to compare submissions by: {exc}")
    await run_in_threadpool(start_job, session, ctx.celery, ctx.settings, staff.assignment, staff.user)
    return see_other(f"/assignments/{slug}/similarity")


@router.get("/assignments/{slug}/similarity/pair", response_class=HTMLResponse)
def similarity_pair(request: Request, ctx: Context, staff: Staff, a: str = "", b: str = "") -> Response:
    """The two students' files side by side, shared regions highlighted (from the stored report)."""
    slug, settings = staff.assignment.slug, ctx.settings
    path = report_path(settings.data_dir, slug)
    report = load_report(path)
    pair = report.pair(a, b) if report else None
    if report is None or pair is None:
        return page(request, "error.html", staff.user, status.HTTP_404_NOT_FOUND, title="Not found",
                    message=f"No pair {a} and {b} in the stored similarity report of {slug}.")
    rubric = load_rubric(slug, search=settings.rubric_dirs)
    try:
        sources = pair_sources(ctx.blobs, report, pair, rubric, pipeline_config(settings, rubric).limits)
    except (BadArchive, FileNotFoundError) as exc:
        return page(request, "error.html", staff.user, status.HTTP_404_NOT_FOUND, title="Submission unavailable",
                    message=f"A compared zip can no longer be read ({exc}); compute the report again.")
    base = load_base_files(path)

    def side(student: str, file: str, lines: Sequence[LineRange]) -> list[tuple[int, str, bool]]:
        return numbered_lines(sources[student].get(file, ""), lines, starter_lines(base, file))

    def against(file: str) -> str:
        return (f"the base's {file}, sha256 {text_sha256(base[file])[:16]}" if file in base
                else f"no {file} in the base")

    files = [{"match": match,
              "a": side(pair.a, match.path_a, match.lines_a), "b": side(pair.b, match.path_b, match.lines_b),
              "ranges_a": describe_ranges(match.lines_a), "ranges_b": describe_ranges(match.lines_b),
              "base_a": against(match.path_a), "base_b": against(match.path_b)}
             for match in pair.matches]
    return page(request, "ops_pair.html", staff.user, assignment=staff.assignment, report=report, pair=pair,
                files=files, rank=report.pairs.index(pair) + 1, zone=ctx.settings.course_zone)
