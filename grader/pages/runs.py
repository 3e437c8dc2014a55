"""A student's history (with which run counts, and, where the assignment allows it, the
student's choice of it) and the run page (drawn by grader.pages.run_view) with its JSON poll;
staff of the assignment see its runs too (grader.auth.credentials's browser principal)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Depends, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from grader.api.deps import get_context
from grader.auth.credentials import browser_principal
from grader.auth.sessions import current_user
from grader.course.counted_choice import REFUSAL_TEXT, StudentRefusal, choose, clear, student_refusal
from grader.course.grade_reads import counted_for, run_grades
from grader.course.membership import roles_of
from grader.ids import RowId, parse_row_id
from grader.models import Assignment, GradeAdjustment, Run, Submission, User
from grader.pages.common import Db, Sender, Viewer, absent, logged_in, page, see_other
from grader.pages.run_view import render_run
from grader.reads.runstatus import run_status
from grader.runs.dispatch import chosen_timing
from grader.runs.timing_piece import time_if_passed_over

router = APIRouter(include_in_schema=False)


@router.get("/submissions", response_class=HTMLResponse)
def history(request: Request, session: Db, user: Viewer) -> Response:
    enrolled = list(roles_of(session, user.id))
    subs = session.scalars(
        select(Submission).where(Submission.user_id == user.id, Submission.assignment_id.in_(enrolled))
        .options(selectinload(Submission.runs), selectinload(Submission.assignment))
        .order_by(Submission.id.desc())
    ).all()
    zone = get_context(request).settings.course_zone
    grades = run_grades(session, [run for sub in subs for run in sub.runs], zone)
    assignments = {sub.assignment.id: sub.assignment for sub in subs}
    graded_by_hand = session.scalars(select(Assignment).join(GradeAdjustment, GradeAdjustment.assignment_id == Assignment.id)
                                     .where(GradeAdjustment.user_id == user.id, GradeAdjustment.set_aside.is_(None),
                                            Assignment.id.in_(enrolled)))
    assignments.update({a.id: a for a in graded_by_hand})  # a manual grade needs no upload (an exemption)
    counted = {a.slug: counted_for(session, a, user.id, [r for sub in subs if sub.assignment_id == a.id
                                                         for r in sub.runs], grades) for a in assignments.values()}
    return page(request, "submissions.html", user, submissions=subs, zone=zone, grades=grades,
                assignments=sorted(assignments.values(), key=lambda a: a.slug),
                counting={slug: c.run_id for slug, c in counted.items()},
                student_grades={slug: c.grade for slug, c in counted.items() if c.grade},
                pins={slug: c.pin for slug, c in counted.items() if c.pin}, refusal=_refusal_shown(request.query_params, assignments))


def _refusal_shown(params: Mapping[str, str], assignments: dict[int, Assignment]) -> str | None:
    """The fixed sentence of a refused choice (`refused` and `assignment` in the query), so that
    a link cannot put words of its own on the page."""
    slugs = {a.slug for a in assignments.values()}
    try:
        refusal = StudentRefusal(params.get("refused", ""))
    except ValueError:
        return None
    slug = params.get("assignment", "")
    return REFUSAL_TEXT[refusal].format(slug=slug) if slug in slugs else None


def _refused(refusal: StudentRefusal, assignment: Assignment) -> Response:
    return see_other(f"/submissions?refused={refusal.value}&assignment={assignment.slug}#counting")


@router.post("/submissions/counted")
async def choose_counted(request: Request, session: Db, user: Sender) -> Response:
    """The student counts one of their own scored runs, where the assignment allows it and staff
    have not chosen; a refusal goes back to the history with why."""
    form = await request.form()
    run_id = str(form.get("run_id", ""))
    named = parse_row_id(run_id)
    run = _readable_run(session, user, named) if named is not None else None
    if run is None or run.submission.user_id != user.id:
        raise absent(f"run {run_id} of yours")
    assignment = run.submission.assignment
    refusal = student_refusal(session, assignment, user, run)
    if refusal is not None:
        return _refused(refusal, assignment)
    choose(session, assignment, user.id, run, user)
    time_if_passed_over(session, run, chosen_timing(get_context(request)))
    return see_other(f"/runs/{run.id}#run-counts" if form.get("back") == "run" else f"/submissions#counts-{assignment.slug}")


@router.post("/submissions/counted/remove")
async def clear_counted(request: Request, session: Db, user: Sender) -> Response:
    """The student goes back to the score policy's pick (their own choice only)."""
    slug = str((await request.form()).get("assignment", ""))
    assignment = session.scalar(select(Assignment).where(Assignment.slug == slug,
                                                         Assignment.id.in_(list(roles_of(session, user.id)))))
    if assignment is None:
        raise absent(f"assignment {slug!r} of yours")
    refusal = student_refusal(session, assignment, user)
    if refusal is not None:
        return _refused(refusal, assignment)
    clear(session, assignment, user.id)
    session.commit()
    return see_other(f"/submissions#counts-{assignment.slug}")


def _readable_run(session: Session, user: User, run_id: int) -> Run | None:
    run = session.get(Run, run_id)
    # Another student's run, or one of an assignment not taught, reads as absent.
    if run is None or not browser_principal(session, user).can_read_submission(run.submission):
        return None
    return run


def _shown_run(request: Request, run_id: RowId, session: Db) -> tuple[User, Run]:
    """The logged-in user and their readable run. It calls `logged_in` itself rather than
    depending on it, so that an id that is not one (/runs/abc) is refused as such (the 404
    page) before anyone is asked to log in: FastAPI skips a dependency whose fields fail."""
    user = logged_in(request, session)
    run = _readable_run(session, user, run_id)
    if run is None:
        raise absent(f"run {run_id}")
    return user, run


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, session: Db, shown: Annotated[tuple[User, Run], Depends(_shown_run)]) -> Response:
    user, run = shown
    return render_run(request, session, user, run)


@router.get("/runs/{run_id}/status")
def run_status_json(request: Request, run_id: RowId, session: Db) -> JSONResponse:
    """The run page's poll: JSON, so a logged-out poller gets 401 (the page says so), not a redirect."""
    user = current_user(request, session)
    if user is None:
        return JSONResponse({"detail": "log in"}, status.HTTP_401_UNAUTHORIZED)
    run = _readable_run(session, user, run_id)
    if run is None:
        return JSONResponse({"detail": f"no run {run_id}"}, status.HTTP_404_NOT_FOUND)
    settings = get_context(request).settings
    return JSONResponse(run_status(session, run, settings.eta_recent_runs, settings.rubric_dirs, settings.split_slots),
                        headers={"Cache-Control": "no-store"})
