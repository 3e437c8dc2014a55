"""The staff's gradebook of an assignment (filtered, paged, charted), its CSV and JSON exports,
and re-grading: of the rows the filters select (the ticked ones, each student's newest, or all
of theirs), always through a confirmation page; or of one submission."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urlencode

from fastapi import APIRouter, BackgroundTasks, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy.orm import Session
from starlette.datastructures import ImmutableMultiDict

from grader.accepting import admit_committed
from grader.api.deps import Context, get_context
from grader.api.gradebook import canvas_csv, detailed_csv, gradebook_out
from grader.auth.sessions import CSRF_FIELD
from grader.course import adjustments
from grader.course.membership import staff_anywhere
from grader.ids import RowId, parse_row_id
from grader.models import Assignment, Submission, User
from grader.notify import answer_messages, send_quietly
from grader.pages import gradebook_view
from grader.pages.common import (
    CourseStaff,
    Db,
    Sender,
    Viewer,
    absent,
    acting_on,
    default_slug,
    page,
    see_other,
    staff_assignment,
    taught_slugs,
)
from grader.reads import gradebook_reads
from grader.roles import Power
from grader.service import record_regrade

router = APIRouter(include_in_schema=False)


def _asked_gradebook(request: Request, session: Session, user: User, params: Mapping[str, str] | None = None,
                     power: Power = Power.view) -> tuple[Assignment, gradebook_reads.Gradebook]:
    """The gradebook `params` (by default the query string) ask for, of an assignment in whose
    course the user has `power`."""
    params = request.query_params if params is None else params
    slug = params.get("assignment") or default_slug(request, taught_slugs(session, user))
    policy = params.get("policy") or None  # None: the assignment's policy
    assignment = staff_assignment(session, user, slug, power)
    settings = get_context(request).settings
    try:
        return assignment, gradebook_reads.gradebook(session, assignment, policy, settings.course_zone,
                                                     settings.rubric_dirs)
    except ValueError:
        raise absent(f"gradebook for {slug!r} ({policy})") from None


def _view(book: gradebook_reads.Gradebook, params: Mapping[str, str]) -> gradebook_view.View:
    return gradebook_view.parse_view(params, book.assignment, book.policy, [p.problem_id for p in book.problems])


@router.get("/gradebook", response_class=HTMLResponse)
def gradebook(request: Request, session: Db, user: Viewer) -> Response:
    """The gradebook asked for; staff whose courses hold no assignment yet (a course just made)
    are sent to the course list instead, where assignments are added."""
    if "assignment" not in request.query_params and staff_anywhere(session, user.id) \
            and not taught_slugs(session, user):
        return see_other("/courses")
    return _gradebook_page(request, session, user, request.query_params)


def _gradebook_page(request: Request, session: Session, user: User, params: Mapping[str, str],
                    status_code: int = 200, refusal: str | None = None) -> HTMLResponse:
    """The gradebook `params` ask for; `refusal`: why its bulk re-grade form was refused (shown
    beside it, the filters kept)."""
    assignment, book = _asked_gradebook(request, session, user, params)
    view = _view(book, params)
    rows = gradebook_view.select_rows(book, view)  # the charts cover them all, the table one page
    shown = gradebook_view.paginate(rows, view.page, get_context(request).settings.gradebook_page_size)
    queued = params.get("queued", "")
    return page(request, "gradebook.html", user, status_code, refusal=refusal, book=book, policy=book.policy,
                policies=gradebook_reads.POLICIES,
                view=replace(view, page=shown.page), shown=shown, states=gradebook_view.STATE_CHOICES,
                sections=sorted({r.section for r in book.rows if r.section}),
                histogram=gradebook_view.score_histogram(book, rows),
                distributions=gradebook_view.speedup_distributions(book, rows),
                uncalibrated=gradebook_view.uncalibrated_models(book.rows),
                queued=int(queued) if queued.isascii() and queued.isdigit() else None,
                newest=gradebook_view.newest_submissions(session, assignment), row_regrades=gradebook_view.row_regrades,
                open_requests=adjustments.open_requests(session, assignment), zone=get_context(request).settings.course_zone,
                course=assignment.course,
                submission_count=sum(r.submissions for r in rows))


def _bulk_plan(request: Request, session: Session, user: User,
               params: ImmutableMultiDict[str, str]) -> tuple[Assignment, gradebook_view.BulkRegrade] | Response:
    """What the bulk re-grade form (its filters, `which` and ticked rows) would queue, or the
    page saying why nothing would."""
    assignment, book = _asked_gradebook(request, session, user, params, Power.grade)
    which = str(params.get("which", "selected"))
    ticked = [named for named in map(parse_row_id, params.getlist("submission")) if named is not None]
    if which == "selected" and not ticked:
        return _gradebook_page(request, session, user, params, status.HTTP_400_BAD_REQUEST,
                               "Nothing selected. Tick at least one student's row to re-grade the selected "
                               "submissions.")
    try:
        return assignment, gradebook_view.bulk_regrade(session, assignment, book, _view(book, params), which, ticked)
    except LookupError as exc:
        raise absent(str(exc)) from None


def _confirm_page(request: Request, user: User, plan: gradebook_view.BulkRegrade,
                  changed: bool = False) -> HTMLResponse:
    fields = [*plan.view.params().items(), ("which", plan.which),
              *(("submission", str(s.id)) for s in plan.targets if plan.which == "selected"),
              ("expect", plan.token)]
    return page(request, "confirm.html", user, status.HTTP_409_CONFLICT if changed else 200,
                title="Confirm the re-grade",
                question=plan.summary() if plan.targets else
                f"No submissions to re-grade: no student {plan.view.describe()} has uploaded one.",
                details=["Each re-grade is a new run of the same upload, queued round-robin over students "
                         "(held while grading is paused).",
                         "A grade only changes when its re-grade is scored: one that fails on infrastructure "
                         "never replaces it."],
                notice="The rows the filters select changed since the confirmation was shown; check the "
                       "new count and confirm again." if changed else None,
                action="/gradebook/regrade", fields=fields if plan.targets else None,
                confirm_label=f"Queue {len(plan.targets)} re-grade run{'' if len(plan.targets) == 1 else 's'}",
                cancel=plan.view.url(), cancel_label="Back to the gradebook")


@router.get("/gradebook/regrade", response_class=HTMLResponse)
def regrade_confirm(request: Request, session: Db, user: Viewer) -> Response:
    """The confirmation of a bulk re-grade: the gradebook's bulk form lands here (GET, so it
    works without script and a reload changes nothing); only its button queues the runs."""
    plan = _bulk_plan(request, session, user, request.query_params)
    return plan if isinstance(plan, Response) else _confirm_page(request, user, plan[1])


@router.post("/gradebook/regrade")
async def regrade_many(request: Request, ctx: Context, session: Db, user: Sender) -> Response:
    """Queue the confirmed bulk re-grade. Without the confirmation's token the form goes to the
    confirmation page instead; with a token of another set of submissions (a student uploaded
    or the roster changed since) the confirmation is shown again with the new count."""
    form = ImmutableMultiDict([(k, str(v)) for k, v in (await request.form()).multi_items()])
    plan = _bulk_plan(request, session, user, form)
    if isinstance(plan, Response):
        return plan
    assignment, bulk = plan
    if "expect" not in form:
        return see_other("/gradebook/regrade?" + urlencode([(k, v) for k, v in form.multi_items()
                                                             if k != CSRF_FIELD]))
    if form["expect"] != bulk.token:
        return _confirm_page(request, user, bulk, changed=True)
    run_ids = [record_regrade(session, sub).id for sub in bulk.targets]
    session.commit()
    for run_id in run_ids:  # committed: a database fault now delays the sending, never the answer
        admit_committed(ctx, run_id)
    return see_other(f"{bulk.view.url()}&queued={len(run_ids)}")


def _download_headers(book: gradebook_reads.Gradebook, extension: str, name: str = "gradebook") -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{book.assignment}-{name}-{book.policy}.{extension}"',
            "Cache-Control": "no-store"}


@router.get("/gradebook.csv")
def gradebook_csv_export(request: Request, session: Db, user: Viewer) -> Response:
    """The same CSV for Canvas as the API's export, for the logged-in instructor."""
    _, book = _asked_gradebook(request, session, user)
    return Response(canvas_csv([book]), media_type="text/csv; charset=utf-8", headers=_download_headers(book, "csv"))


@router.get("/courses/{course}/gradebook.csv")
def course_csv_export(request: Request, session: Db, staff: CourseStaff) -> Response:
    """The course's CSV for Canvas (a column per assignment), for its staff."""
    settings = get_context(request).settings
    books = gradebook_reads.course_gradebooks(session, staff.course, None, settings.course_zone, settings.rubric_dirs)
    return Response(canvas_csv(books), media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="{staff.course.slug}-canvas.csv"', "Cache-Control": "no-store"})


@router.get("/gradebook-detailed.csv")
def gradebook_detailed_csv_export(request: Request, session: Db, user: Viewer) -> Response:
    """The same detailed CSV as the API's export, for the logged-in instructor."""
    _, book = _asked_gradebook(request, session, user)
    return Response(detailed_csv(book), media_type="text/csv; charset=utf-8",
                    headers=_download_headers(book, "csv", "gradebook-detailed"))


@router.get("/gradebook.json")
def gradebook_json_export(request: Request, session: Db, user: Viewer) -> Response:
    """The same JSON as the API's export, for the logged-in instructor."""
    _, book = _asked_gradebook(request, session, user)
    return JSONResponse(gradebook_out(book).model_dump(mode="json"), headers=_download_headers(book, "json"))


@router.post("/submissions/{submission_id}/regrade")
def regrade(submission_id: RowId, background: BackgroundTasks, ctx: Context, session: Db, user: Sender) -> Response:
    """A new run of one submission; it answers the open regrade requests of the submission's runs."""
    sub = acting_on(session, user, session.get(Submission, submission_id), Power.grade, f"submission {submission_id}")
    run = adjustments.regrade(session, sub, user)
    mail, run_id = answer_messages(ctx.settings, run.answers), run.id
    session.commit()
    admit_committed(ctx, run_id)  # committed: the run page says if it waits to be sent
    background.add_task(send_quietly, ctx.settings.smtp, mail)  # after the answer
    return see_other(f"/runs/{run_id}")
