"""What a course's instructor does on its members page for the accounts they still set up
(grader.auth.ownership: never used, in no course of another's): give one a first-login link
(shown once) or its e-mail, and re-issue the first logins of every such account at once (links
e-mailed where the service sends mail and the account has an address, the rest in a CSV
download; grader.auth.first_logins). Anything else is refused with a 403 page saying who can,
recorded in the audit log.
"""
from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, BackgroundTasks, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from grader.api.deps import Context
from grader.auth.audit import Via
from grader.auth.client_address import request_address
from grader.auth.first_logins import issue_first_login, links_csv, reissue
from grader.auth.ownership import change_email, refusal, refused
from grader.course.membership import role_in_course
from grader.models import User
from grader.notify import first_login_message, send_quietly
from grader.pages.common import CourseInstructorForm, CourseOf, Db, see_other
from grader.pages.members_view import members_page
from grader.service import find_user

router = APIRouter(include_in_schema=False)


def _set_up(request: Request, session: Session, staff: CourseOf, username: str,
            what: str) -> User | HTMLResponse:
    """The member `username` of the course when the instructor may set the account up; else
    the members page saying why not (404 outside the course, else 403 naming who can), the
    refusal recorded."""
    target = find_user(session, username)
    if target is None or role_in_course(session, target.id, staff.course.id) is None:
        words, code = f"“{username}” is not a member of {staff.course.slug}.", status.HTTP_404_NOT_FOUND
    else:
        why = refusal(session, staff.user, target)
        if why is None:
            return target
        words, code = why.words, status.HTTP_403_FORBIDDEN
    refused(session, staff.user, target, what, words, Via.web, request_address(request), login=username)
    return members_page(request, session, staff, code, error=words)


@router.post("/courses/{course}/members/{username}/first-login-link", response_class=HTMLResponse)
def member_first_login(request: Request, username: str, ctx: Context, session: Db, staff: CourseInstructorForm
                       ) -> Response:
    """A first-login link for one account the instructor sets up, shown once on the members page."""
    target = _set_up(request, session, staff, username, "issue a first-login link")
    if isinstance(target, HTMLResponse):
        return target
    link = issue_first_login(session, staff.user, target, ctx.settings, "shown on the members page",
                             request_address(request))
    response = members_page(request, session, staff, link={
        "username": target.username, "link": link, "absolute": bool(ctx.settings.public_url),
        "hours": ctx.settings.password_reset_max_age_s / 3600})
    response.headers["Cache-Control"] = "no-store"  # the link is shown once
    return response


@router.post("/courses/{course}/members/{username}/email", response_class=HTMLResponse)
async def member_email(request: Request, username: str, session: Db, staff: CourseInstructorForm) -> Response:
    """The e-mail of an account the instructor sets up (its person's, once they use it)."""
    form = await request.form()
    target = _set_up(request, session, staff, username, "change the e-mail")
    if isinstance(target, HTMLResponse):
        return target
    problem = change_email(session, staff.user, target, str(form.get("email", "")), Via.web, request_address(request))
    if problem is not None:
        return members_page(request, session, staff, status.HTTP_400_BAD_REQUEST, error=problem)
    return see_other(f"/courses/{staff.course.slug}/members?saved={quote(target.username)}")


@router.post("/courses/{course}/first-logins")
def course_first_logins(request: Request, background: BackgroundTasks, ctx: Context, session: Db,
                        staff: CourseInstructorForm) -> Response:
    """New first-login links for every account of the course never used that the instructor
    sets up: e-mailed where possible (after the answer), the others in the CSV this answers
    with, which also names the accounts left out and why."""
    settings = ctx.settings
    done = reissue(session, staff.user, staff.course, settings, request_address(request))
    session.commit()  # the links exist before they are mailed
    hours = settings.password_reset_max_age_s / 3600
    background.add_task(send_quietly, settings.smtp, [
        first_login_message(settings.smtp.from_, one.email, one.login, one.link, hours, staff.course, staff.user)
        for one in done if one.mailed and one.email and one.link])
    return Response(links_csv(done), media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="first-logins-{staff.course.slug}.csv"',
        "Cache-Control": "no-store"})
