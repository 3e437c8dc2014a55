"""Regrade requests, manual adjustments and comments (grader.course.adjustments): a student asks for a
regrade of their own run from its page; the course's staff (instructors and TAs) adjust a run's
grade from its page, and answer the requests in a queue per assignment (accept by re-grading or by an
adjustment, or reject with a reply). The student sees the answer on the run page
(templates/_regrade.html), where the student and the staff may also comment on the run.

A run that is not the student's own, or not of a course the user is staff of, reads as absent
(the 404 page); one the user reads but may not act on (a student adjusting their own run) is
refused with a 403 page; every form is CSRF-checked (Sender, GraderForm) and answers with a
redirect, or, refused, with its own page again: the words beside the form, what was typed
still in it.
Where mail is set up, a new request is mailed to the assignment's staff and an answer to its
student (grader.notify), after the page answered.
"""
from __future__ import annotations

from email.message import EmailMessage

from fastapi import APIRouter, BackgroundTasks, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from grader.accepting import admit_committed
from grader.api.deps import Context, get_context
from grader.course import adjustments
from grader.course.adjustments import Show, WorkflowError
from grader.course.grade_reads import run_grades
from grader.course.membership import role_in
from grader.ids import RowId
from grader.models import RegradeRequest, Run, User
from grader.notify import answer_messages, request_messages, send_quietly
from grader.pages.common import Db, GraderForm, Sender, Staff, StaffOf, absent, acting_on, page, see_other
from grader.pages.run_view import Refused, render_run
from grader.roles import Power

router = APIRouter(include_in_schema=False)
DONE = {"regrade": "re-graded", "adjust": "adjusted", "reject": "rejected"}  # the action -> the queue's notice


async def _field(request: Request, name: str) -> str:
    return str((await request.form()).get(name) or "")


def _mail(request: Request, background: BackgroundTasks, messages: list[EmailMessage]) -> None:
    """Send `messages` once the page has answered (the request's session commits first)."""
    background.add_task(send_quietly, get_context(request).settings.smtp, messages)


async def _refused_on_run(request: Request, session: Session, user: User, run: Run, form: str,
                          exc: WorkflowError, *fields: str) -> HTMLResponse:
    """The run page again, the refusal's words beside `form`, its `fields` as they were sent."""
    session.rollback()
    kept = {name: await _field(request, name) for name in fields}
    return render_run(request, session, user, run, status.HTTP_400_BAD_REQUEST,
                      Refused(form, f"{exc} Nothing was changed.", kept))


@router.post("/runs/{run_id}/regrade-request")
async def ask_regrade(request: Request, background: BackgroundTasks, run_id: RowId, session: Db,
                      user: Sender) -> Response:
    """The run's own student asks for a regrade, saying why; the staff are mailed."""
    run = session.get(Run, run_id)
    if run is None or run.submission.user_id != user.id \
            or role_in(session, user.id, run.submission.assignment_id) is None:
        raise absent(f"run {run_id} of yours")
    try:
        asked = adjustments.request_regrade(session, run, user, await _field(request, "reason"))
    except WorkflowError as exc:
        return await _refused_on_run(request, session, user, run, "regrade-request", exc, "reason")
    _mail(request, background, request_messages(session, get_context(request).settings, asked))
    return see_other(f"/runs/{run_id}#regrade")


@router.post("/runs/{run_id}/adjustments")
async def adjust_run(request: Request, background: BackgroundTasks, run_id: RowId, session: Db,
                     user: Sender) -> Response:
    """Staff of the run's course adjust its grade, with a reason; it answers the run's open
    request, whose student is mailed."""
    run = session.get(Run, run_id)
    if run is None:
        raise absent(f"run {run_id}")
    acting_on(session, user, run.submission, Power.grade, f"run {run_id}")
    try:
        made = adjustments.adjust(session, run, user, await _field(request, "points"), await _field(request, "reason"))
    except WorkflowError as exc:
        return await _refused_on_run(request, session, user, run, "adjustment", exc, "points", "reason")
    _mail(request, background, answer_messages(get_context(request).settings, made.answers))
    return see_other(f"/runs/{run_id}#regrade")


@router.post("/runs/{run_id}/comments")
async def comment_run(request: Request, run_id: RowId, session: Db, user: Sender) -> Response:
    """The run's student, or staff of its course, comment on the run."""
    run = session.get(Run, run_id)
    if run is None:
        raise absent(f"run {run_id}")
    acting_on(session, user, run.submission, None, f"run {run_id}")
    try:
        adjustments.comment(session, run, user, await _field(request, "body"))
    except WorkflowError as exc:
        return await _refused_on_run(request, session, user, run, "comment", exc, "body")
    return see_other(f"/runs/{run_id}#comments")


def _queue_page(request: Request, session: Session, staff: StaffOf, status_code: int = 200,
                refused: Refused | None = None) -> HTMLResponse:
    """The assignment's requests, open ones first, each with its run's current grade; `show` (the
    query) picks open (the default), answered, mine (those the viewer answered) or all; `refused`:
    the answer to one request that was refused (its form is the request's id as a string)."""
    asked, zone = adjustments.assignment_requests(session, staff.assignment), get_context(request).settings.course_zone
    show = Show(request.query_params["show"]) if request.query_params.get("show") in Show.__members__ else Show.open
    listed, done = adjustments.shown(asked, show, staff.user), request.query_params.get("done")
    return page(request, "regrade_requests.html", staff.user, status_code, assignment=staff.assignment, requests=listed,
                show=show, counts={s: len(adjustments.shown(asked, s, staff.user)) for s in Show},
                grades=run_grades(session, [r.run for r in listed], zone), zone=zone, here="regrade-requests",
                done=done if done in DONE.values() else None, refused=refused)


@router.get("/assignments/{slug}/regrade-requests", response_class=HTMLResponse)
def queue(request: Request, session: Db, staff: Staff) -> Response:
    return _queue_page(request, session, staff)



@router.post("/assignments/{slug}/regrade-requests/{request_id}")
async def decide(request: Request, background: BackgroundTasks, request_id: RowId, ctx: Context, session: Db,
                 staff: GraderForm) -> Response:
    """Accept a request by re-grading (a new run) or by an adjustment, or reject it with a reply;
    the student is mailed the answer."""
    asked = session.get(RegradeRequest, request_id)
    if asked is None or asked.run.submission.assignment_id != staff.assignment.id:
        raise absent(f"regrade request {request_id} of {staff.assignment.slug}")
    action, reply = await _field(request, "action"), await _field(request, "reply")
    new_run, answered = None, [asked]
    try:
        if action == "regrade":
            new_run = adjustments.accept_with_regrade(session, asked, staff.user, reply)
            answered = new_run.answers
        elif action == "adjust":
            answered = adjustments.accept_with_adjustment(session, asked, staff.user, await _field(request, "points"),
                                                          reply).answers
        elif action == "reject":
            adjustments.reject(asked, staff.user, reply)
        else:
            raise WorkflowError("Choose re-grade, adjust or reject.")
    except WorkflowError as exc:
        session.rollback()
        kept = {"reply": reply, "points": await _field(request, "points")}
        return _queue_page(request, session, staff, status.HTTP_400_BAD_REQUEST,
                           Refused(str(request_id), f"{exc} Nothing was changed.", kept))
    _mail(request, background, answer_messages(ctx.settings, answered))
    if new_run is not None:
        session.commit()
        admit_committed(ctx, new_run.id)  # committed: the new run's page says if it waits to be sent
    return see_other(f"/assignments/{staff.assignment.slug}/regrade-requests?show=all&done={DONE[action]}"
                     f"#request-{request_id}")
