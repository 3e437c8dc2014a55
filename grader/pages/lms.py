"""The LMS pages. A course's (/courses/{course}/lms): the LMS courses and links that open it
(grader.lti), each link's grades as last sent to the LMS gradebook, student by student, and the
instructor's two buttons: send grades now, read the roster now. Both queue the work for the
service's CPU worker (grader.lti.tasks); the page shows the outcome once it has run. The site
administrators' (/ops/lti): the registered platforms (made with `grader lti add-platform`) and
the tool's own addresses and keys, which an LMS admin enters."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select

from grader.ids import parse_row_id
from grader.lti.keys import public_key_set
from grader.lti.overview import course_lms
from grader.lti.registry import platforms
from grader.lti.tasks import queue_roster_sync, queue_send
from grader.models import LtiContext, LtiResourceLink
from grader.pages.common import (
    CourseInstructorForm,
    CourseStaff,
    Db,
    Viewer,
    absent,
    forbidden,
    get_context,
    page,
    see_other,
)

router = APIRouter(include_in_schema=False)
NOTICES = {"grades": "Grades are being sent: reload in a minute to see each student's result.",
           "roster": "The roster is being read: reload in a minute to see who was enrolled or dropped."}


@router.get("/courses/{course}/lms", response_class=HTMLResponse)
def lms_page(request: Request, session: Db, staff: CourseStaff) -> Response:
    return page(request, "course_lms.html", staff.user, course=staff.course, role=staff.role,
                contexts=course_lms(session, staff.course.id), notice=NOTICES.get(request.query_params.get("queued", "")))


@router.get("/ops/lti", response_class=HTMLResponse)
def registrations(request: Request, session: Db, user: Viewer) -> Response:
    if not user.site_admin:
        raise forbidden("Only a site administrator sees the LMS registrations (`grader user admin` names them).")
    settings = get_context(request).settings
    base = settings.public_url.rstrip("/") or str(request.base_url).rstrip("/")
    return page(request, "ops_lti.html", user, platforms=platforms(session), base=base,
                keys=[k["kid"] for k in public_key_set(settings)["keys"]])


@router.post("/courses/{course}/lms/grades")
async def send_grades(request: Request, session: Db, staff: CourseInstructorForm) -> Response:
    """Queue the send of one link's grades; `resend`: every grade again, not only what changed."""
    form = await request.form()
    link = session.scalar(select(LtiResourceLink).join(LtiContext)
                          .where(LtiResourceLink.id == _row_id(form.get("link")), LtiContext.course_id == staff.course.id))
    if link is None:
        raise absent("that LMS link among this course's")
    ctx = get_context(request)
    queue_send(ctx.celery, ctx.settings, link.id, resend=form.get("resend") == "1")
    return see_other(f"/courses/{staff.course.slug}/lms?queued=grades")


@router.post("/courses/{course}/lms/roster")
async def read_roster(request: Request, session: Db, staff: CourseInstructorForm) -> Response:
    form = await request.form()
    context = session.scalar(select(LtiContext).where(LtiContext.id == _row_id(form.get("context")),
                                                      LtiContext.course_id == staff.course.id))
    if context is None:
        raise absent("that LMS course among this course's")
    ctx = get_context(request)
    queue_roster_sync(ctx.celery, ctx.settings, context.id)
    return see_other(f"/courses/{staff.course.slug}/lms?queued=roster")


def _row_id(value: object) -> int:
    """The id a form field names; 0 (no row) for anything else."""
    return parse_row_id(str(value or "")) or 0
