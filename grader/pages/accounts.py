"""An account's own page: its login, name, e-mail, courses and staff mail. The person changes
their e-mail here (with their current password) and turns their courses' staff mail on or off;
a site administrator opens anyone's (/accounts/<login>), changes its e-mail and issues it a
reset link. Who may change what: grader.auth.ownership; anyone else asking for another's page
gets a 403 saying who may, recorded in the audit log.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.api.deps import Context, get_context
from grader.auth.audit import Event, Via, record
from grader.auth.client_address import request_address
from grader.auth.logins import confirm_password
from grader.auth.ownership import ADMIN_ONLY, change_email, refused, set_staff_mail
from grader.auth.password_reset import issue_reset, reset_link
from grader.auth.throttle import Throttle, refusal_words
from grader.models import Course, Enrollment, Role, User
from grader.pages.common import Db, Sender, Viewer, absent, forbidden, page, see_other
from grader.service import find_user

router = APIRouter(include_in_schema=False)
OWN = "/settings/account"


def _page(request: Request, session: Session, viewer: User, subject: User, status_code: int = 200,
          **values: Any) -> HTMLResponse:
    """The account page of `subject` as `viewer` sees it (their own, or a site administrator's view)."""
    courses = session.execute(select(Course, Enrollment.role, Enrollment.created_at)
                              .join(Enrollment, Enrollment.course_id == Course.id)
                              .where(Enrollment.user_id == subject.id).order_by(Course.slug)).all()
    own = viewer.id == subject.id
    site_role = [word for word, held in (("site administrator", subject.site_admin),
                                         ("may make courses", subject.role is Role.instructor)) if held]
    values.setdefault("error", None)
    values.setdefault("saved", request.query_params.get("saved"))
    values.setdefault("reset", None)
    return page(request, "account.html", viewer, status_code, subject=subject, own=own, courses=courses,
                staff=any(part.is_staff for _, part, _ in courses), zone=get_context(request).settings.course_zone,
                site_role=", ".join(site_role) or "none", action=OWN if own else f"/accounts/{quote(subject.username)}", **values)


@router.get(OWN, response_class=HTMLResponse)
def own_account(request: Request, session: Db, user: Viewer) -> Response:
    return _page(request, session, user, user)


@router.post(OWN + "/email", response_class=HTMLResponse)
async def own_email(request: Request, ctx: Context, session: Db, user: Sender) -> Response:
    """The person's new e-mail, once their current password confirms it is them (a borrowed
    session cannot point /forgot elsewhere); a wrong one counts as a failed login."""
    form = await request.form()
    address = request_address(request)
    confirmed = confirm_password(session, Throttle(ctx.settings.throttle), ctx.settings.argon2, user,
                                 str(form.get("current", "")), address)
    if confirmed.block is not None:
        response = _page(request, session, user, user, status.HTTP_429_TOO_MANY_REQUESTS,
                         error=refusal_words(confirmed.block, ctx.settings.course_zone))
        response.headers["Retry-After"] = str(confirmed.block.retry_after_s())
        return response
    problem = (change_email(session, user, user, str(form.get("email", "")), Via.web, address)
               if confirmed.user is not None else "Your current password is not right; the e-mail is unchanged.")
    if problem is not None:
        return _page(request, session, user, user, status.HTTP_400_BAD_REQUEST, error=problem)
    return see_other(OWN + "?saved=email")


@router.post(OWN + "/staff-mail", response_class=HTMLResponse)
async def own_staff_mail(request: Request, session: Db, user: Sender) -> Response:
    """Turn the staff mail of one's courses on or off."""
    wanted = (await request.form()).get("staff_mail") == "on"
    set_staff_mail(session, user, wanted, request_address(request))
    return see_other(OWN + "?saved=staff-mail")


def _administered(request: Request, session: Session, user: User, username: str, what: str) -> User:
    """The account `username` when `user` is a site administrator; else a 403 saying who may,
    recorded (committed before the refusal, which rolls the request's session back)."""
    target = find_user(session, username)
    if not user.site_admin:
        refused(session, user, target, what, ADMIN_ONLY, Via.web, request_address(request), login=username)
        session.commit()
        raise forbidden(ADMIN_ONLY)
    if target is None:
        raise absent(f"account “{username}”")
    return target


@router.get("/accounts", response_class=HTMLResponse)
def find_account(request: Request, session: Db, user: Viewer, login: str = "") -> Response:
    """A site administrator's search: the account page of the login typed."""
    target = _administered(request, session, user, login.strip(), "open an account's page")
    return see_other(f"/accounts/{quote(target.username)}")


@router.get("/accounts/{username}", response_class=HTMLResponse)
def account_page(request: Request, username: str, session: Db, user: Viewer) -> Response:
    target = _administered(request, session, user, username, "open the account page")
    return _page(request, session, user, target)


@router.post("/accounts/{username}/email", response_class=HTMLResponse)
async def account_email(request: Request, username: str, session: Db, user: Sender) -> Response:
    target = _administered(request, session, user, username, "change the e-mail")
    problem = change_email(session, user, target, str((await request.form()).get("email", "")), Via.web,
                           request_address(request))
    if problem is not None:
        return _page(request, session, user, target, status.HTTP_400_BAD_REQUEST, error=problem)
    return see_other(f"/accounts/{quote(target.username)}?saved=email")


@router.post("/accounts/{username}/reset-link", response_class=HTMLResponse)
def account_reset_link(request: Request, username: str, ctx: Context, session: Db, user: Sender) -> Response:
    """A one-time reset link for the account, shown once on its page."""
    target = _administered(request, session, user, username, "issue a reset link")
    token = issue_reset(session, target, ctx.settings.password_reset_max_age_s, issued_by=user)
    record(session, Event.reset_issued, Via.web, user=target, actor=user, address=request_address(request),
           detail="by a site administrator, shown on the account page")
    response = _page(request, session, user, target, reset={
        "link": reset_link(ctx.settings.public_url, token), "absolute": bool(ctx.settings.public_url),
        "hours": ctx.settings.password_reset_max_age_s / 3600})
    response.headers["Cache-Control"] = "no-store"  # the link is shown once
    return response
