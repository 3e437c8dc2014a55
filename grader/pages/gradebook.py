"""The staff's gradebook of an assignment (filtered, paged, charted), its CSV and JSON exports,
and re-grading: the ticked rows, every student's newest, everything, or one submission."""
from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy.orm import Session

from grader import gradebook_view, queries
from grader.api.acceptance import admit_committed
from grader.api.deps import Context, get_context
from grader.api.gradebook import gradebook_csv, gradebook_out
from grader.membership import role_in
from grader.models import CourseRole, Submission, User
from grader.pages.common import (
    Db,
    Sender,
    Viewer,
    absent,
    default_slug,
    page,
    see_other,
    taught_assignment,
    taught_slugs,
)
from grader.service import NotFound, record_regrade

router = APIRouter(include_in_schema=False)


def _asked_gradebook(request: Request, session: Session, user: User) -> queries.Gradebook:
    """The gradebook the query string asks for, of an assignment the user teaches."""
    slug = request.query_params.get("assignment") or default_slug(request, taught_slugs(session, user))
    policy = request.query_params.get("policy") or None  # None: the assignment's policy
    assignment = taught_assignment(session, user, slug)
    try:
        return queries.gradebook(session, assignment, policy, get_context(request).settings.course_zone)
    except ValueError:
        raise absent(f"gradebook for {slug!r} ({policy})") from None


@router.get("/gradebook", response_class=HTMLResponse)
def gradebook(request: Request, session: Db, user: Viewer) -> Response:
    book = _asked_gradebook(request, session, user)
    view = gradebook_view.parse_view(request.query_params, book.assignment, book.policy,
                                     [p.problem_id for p in book.problems])
    rows = gradebook_view.select_rows(book, view)  # the charts cover them all, the table one page
    shown = gradebook_view.paginate(rows, view.page, get_context(request).settings.gradebook_page_size)
    queued = request.query_params.get("queued", "")
    return page(request, "gradebook.html", user, book=book, policy=book.policy, policies=queries.POLICIES,
                view=replace(view, page=shown.page), shown=shown, states=gradebook_view.STATE_CHOICES,
                sections=sorted({r.section for r in book.rows if r.section}),
                histogram=gradebook_view.score_histogram(book, rows),
                distributions=gradebook_view.speedup_distributions(book, rows),
                uncalibrated=gradebook_view.uncalibrated_models(book.rows),
                queued=int(queued) if queued.isdigit() else None,
                submission_count=sum(r.submissions for r in book.rows))


@router.post("/gradebook/regrade")
async def regrade_many(request: Request, ctx: Context, session: Db, user: Sender) -> Response:
    """Re-grade the ticked rows' submissions, every student's newest, or every submission;
    queued round-robin over students (queries.regrade_targets)."""
    form = await request.form()
    slug = str(form.get("assignment", ctx.default_assignment))
    which = str(form.get("which", "selected"))
    assignment = taught_assignment(session, user, slug)
    try:
        if which == "selected":
            ids = [int(str(v)) for v in form.getlist("submission") if str(v).isdigit()]
            if not ids:
                return page(request, "error.html", user, status.HTTP_400_BAD_REQUEST, title="Nothing selected",
                            message="Tick at least one student's row to re-grade the selected submissions.")
            targets = queries.regrade_targets(session, assignment, ids)
        elif which in ("latest", "all"):
            targets = queries.regrade_targets(session, assignment, which)
        else:
            raise NotFound(f"re-grade choice {which!r}")
    except (NotFound, LookupError) as exc:
        raise absent(str(exc).removeprefix("no ")) from None
    run_ids = [record_regrade(session, sub).id for sub in targets]
    session.commit()
    for run_id in run_ids:  # committed: a database fault now delays the sending, never the answer
        admit_committed(ctx, run_id)
    back = str(form.get("back", "")) or f"/gradebook?assignment={slug}"
    if not back.startswith("/gradebook?"):  # only ever back to a gradebook view
        back = f"/gradebook?assignment={slug}"
    return see_other(f"{back}&queued={len(run_ids)}")


def _download_headers(book: queries.Gradebook, extension: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{book.assignment}-gradebook-{book.policy}.{extension}"',
            "Cache-Control": "no-store"}


@router.get("/gradebook.csv")
def gradebook_csv_export(request: Request, session: Db, user: Viewer) -> Response:
    """The same CSV as the API's export, for the logged-in instructor."""
    book = _asked_gradebook(request, session, user)
    return Response(gradebook_csv(book), media_type="text/csv; charset=utf-8", headers=_download_headers(book, "csv"))


@router.get("/gradebook.json")
def gradebook_json_export(request: Request, session: Db, user: Viewer) -> Response:
    """The same JSON as the API's export, for the logged-in instructor."""
    book = _asked_gradebook(request, session, user)
    return JSONResponse(gradebook_out(book).model_dump(mode="json"), headers=_download_headers(book, "json"))


@router.post("/submissions/{submission_id}/regrade")
def regrade(submission_id: int, ctx: Context, session: Db, user: Sender) -> Response:
    sub = session.get(Submission, submission_id)
    if sub is None or role_in(session, user.id, sub.assignment_id) is not CourseRole.staff:
        raise absent(f"submission {submission_id}")
    run_id = record_regrade(session, sub).id
    session.commit()
    admit_committed(ctx, run_id)  # committed: the run page says if it waits to be sent
    return see_other(f"/runs/{run_id}")
