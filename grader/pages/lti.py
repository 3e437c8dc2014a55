"""The LTI 1.3 tool's addresses (grader.lti): /lti/login (the platform's login initiation),
/lti/launch (the launch: checked, then the person logged in and sent on), /lti/jwks (the tool's
public keys), /lti/choose (an instructor's choice of assignment for a link) and /lti/enter (a
launch shown in the LMS's frame, continued in a window of our own).

Where a launch goes: a student to the upload page of the link's assignment, staff to its
gradebook; an instructor to the choice of assignment when the link opens none yet (the picker
signs what it needs into a ticket, so it works in the LMS's frame without a cookie). A launch
in the LMS's frame (the browser says so: Sec-Fetch-Dest iframe) gets a page with a button that
opens kernelgrade in its own window (grader.lti.entry); elsewhere the launch logs in directly.
"""
from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy.orm import Session

from grader.api.deps import get_context
from grader.auth.identities import IdentityRefused
from grader.auth.sessions import log_in, secret_key
from grader.lti import claims as c
from grader.lti.deep_linking import response_token
from grader.lti.entry import issue_entry, redeem_entry
from grader.lti.keys import public_key_set
from grader.lti.launch import STATE_LIFETIME, Launch, LaunchRefused, begin_login, check_launch
from grader.lti.links import NoContext, choosable_assignments, context_of, link_of, open_assignment
from grader.lti.people import Member, person_of, take_part
from grader.lti.roster_sync import roster_due
from grader.lti.tasks import queue_roster_sync
from grader.models import Course, CourseRole, LtiContext, LtiPlatform, LtiResourceLink, User, utcnow
from grader.pages.common import Db, error_page, page, see_other, templates

router = APIRouter(include_in_schema=False)
log = logging.getLogger(__name__)
LAUNCH_PATH, LOGIN_PATH = "/lti/launch", "/lti/login"
CROSS_SITE_POSTS = (LAUNCH_PATH, LOGIN_PATH)  # the platform posts these: grader.security.SameOriginForms lets them in
TICKET_MAX_AGE_S = int(STATE_LIFETIME.total_seconds())
# The pages a launch shows inside the LMS's frame: frameable by any site (an LMS's page may be on
# a host other than its issuer's); they hold no action but a button or a choice of this person's.
FRAMEABLE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
                 "base-uri 'none'; frame-ancestors *; form-action 'self'")


def _base(request: Request) -> str:
    public = get_context(request).settings.public_url
    return public.rstrip("/") if public else str(request.base_url).rstrip("/")


def _frameable(response: HTMLResponse) -> HTMLResponse:
    """A page a launch may show inside the LMS's frame."""
    response.headers["Content-Security-Policy"] = FRAMEABLE_CSP
    return response


def _refused(request: Request, message: str, status_code: int = 403, title: str = "This launch is refused") -> HTMLResponse:
    """The sentence, as a page the LMS's frame may show (a launch's answer lands there)."""
    return _frameable(error_page(request, status_code, title, message))


def _tickets(request: Request) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret_key(get_context(request).settings), salt="kg-lti-choose")


@router.get("/lti/jwks")
def jwks(request: Request) -> JSONResponse:
    return JSONResponse(public_key_set(get_context(request).settings))


@router.api_route(LOGIN_PATH, methods=["GET", "POST"])
async def login_initiation(request: Request, session: Db) -> Response:
    params: dict[str, str] = {k: str(v) for k, v in request.query_params.items()}
    if request.method == "POST":
        params.update({k: str(v) for k, v in (await request.form()).items()})
    try:
        return RedirectResponse(begin_login(session, params, _base(request) + LAUNCH_PATH), status_code=302)
    except LaunchRefused as exc:
        return _refused(request, str(exc), 400)


@router.post(LAUNCH_PATH)
async def launch(request: Request, session: Db) -> Response:
    form = await request.form()
    try:
        checked = check_launch(session, str(form.get("id_token", "")), str(form.get("state", "")))
        role = c.course_role(checked.roles)
        if role is None:
            raise LaunchRefused(f"Your role in this {checked.platform.name} course ({', '.join(checked.roles) or 'none'}) "
                                "gives no access to kernelgrade: instructors, teaching assistants and students have it.")
        context = context_of(session, checked)
        course = session.get(Course, context.course_id) if context.course_id is not None else None
        member = Member.of_launch(checked)
        user = person_of(session, checked.platform, member, course, role)
        user.note_first_login()
    except (LaunchRefused, NoContext, IdentityRefused) as exc:
        session.commit()  # the state stays used and the refusal audited
        return _refused(request, str(exc))
    if course is not None:
        take_part(session, member, user, course, role)
        if role is CourseRole.instructor and roster_due(context, utcnow()):
            _read_roster(request, context)
    link = link_of(session, checked, context)
    if checked.message_type == c.DEEP_LINKING_REQUEST or (link is not None and link.assignment_id is None):
        if role is not CourseRole.instructor:
            return _refused(request, "This link does not open an assignment yet: the course's instructor chooses it "
                            "at their first launch of the link.")
        return _chooser(request, session, checked, context, link, user)
    assert link is not None and link.assignment is not None
    return _enter(request, session, checked, user, _target(link, role))


def _read_roster(request: Request, context: LtiContext) -> None:
    """Queue the LMS course's roster read (an instructor's launch, a course just linked); a broker
    that is down only delays it to the next instructor launch or the LMS page's button."""
    ctx = get_context(request)
    try:
        queue_roster_sync(ctx.celery, ctx.settings, context.id)
    except Exception as exc:  # kombu raises OperationalError and friends
        log.warning("could not queue the roster read of LMS course %s: %s", context.id, exc)


def _target(link: LtiResourceLink, role: CourseRole) -> str:
    slug = link.assignment.slug if link.assignment is not None else ""
    return f"/gradebook?{urlencode({'assignment': slug})}" if role.is_staff else f"/?{urlencode({'assignment': slug})}"


def _framed(request: Request) -> bool:
    return request.headers.get("sec-fetch-dest") == "iframe"


def _enter(request: Request, session: Session, checked: Launch, user: User, target: str) -> Response:
    if not _framed(request):
        log_in(request, session, user, get_context(request).settings.session_max_age_s)
        return see_other(target)
    token = issue_entry(checked.state, user, target)
    return _frameable(templates.TemplateResponse(request, "lti_framed.html", {
        "title": "kernelgrade", "lms": checked.platform.name, "entry": f"/lti/enter/{token}",
        "minutes": TICKET_MAX_AGE_S // 60}))


@router.get("/lti/enter/{token}")
def enter(request: Request, token: str, session: Db) -> Response:
    found = redeem_entry(session, token)
    if found is None:
        return _refused(request, "This link was used already or has expired: open the link in your LMS again.")
    user, target = found
    log_in(request, session, user, get_context(request).settings.session_max_age_s)
    return see_other(target)


def _chooser(request: Request, session: Session, checked: Launch, context: LtiContext, link: LtiResourceLink | None,
             user: User) -> Response:
    settings = checked.claim(c.DEEP_LINKING_SETTINGS)
    ticket: dict[str, Any] = {"user": user.id, "context": context.id, "link": link.id if link is not None else None,
                              "return": settings.get("deep_link_return_url"), "data": settings.get("data")}
    course = session.get(Course, context.course_id) if context.course_id is not None else None
    choices = [(a.slug, a.title, "" if a.course_id is not None else "not in a course yet: it joins this one")
               for a in choosable_assignments(session, context)]
    return _frameable(page(request, "lti_choose.html", None, lms=checked.platform.name, context_title=context.title,
                           course=course.slug if course is not None else None, choices=choices,
                           ticket=_tickets(request).dumps(ticket)))


@router.post("/lti/choose")
async def choose(request: Request, session: Db) -> Response:
    form = await request.form()
    try:
        ticket = _tickets(request).loads(str(form.get("ticket", "")), max_age=TICKET_MAX_AGE_S)
    except BadSignature:
        return _refused(request, "This choice has expired or was altered: open the link in your LMS again.")
    user, context = session.get(User, ticket["user"]), session.get(LtiContext, ticket["context"])
    if user is None or context is None:
        return _refused(request, "This choice's LMS course or person is gone: open the link in your LMS again.")
    linked = context.course_id is not None
    try:
        assignment = open_assignment(session, context, str(form.get("assignment", "")), user)
    except ValueError as exc:
        return _refused(request, str(exc), 400)
    if not linked and context.memberships_url:
        session.commit()  # the course the roster fills exists before the worker reads it
        _read_roster(request, context)
    platform = session.get(LtiPlatform, context.platform_id)
    assert platform is not None
    if ticket["return"]:  # deep linking: the LMS makes the link
        token = response_token(get_context(request).settings, platform, context.deployment_id, ticket["data"],
                               assignment, _base(request) + LAUNCH_PATH)
        response = templates.TemplateResponse(request, "lti_autopost.html", {
            "action": ticket["return"], "fields": [("JWT", token)], "lms": platform.name})
        origin = urlsplit(ticket["return"])
        response.headers["Content-Security-Policy"] = FRAMEABLE_CSP.replace(
            "form-action 'self'", f"form-action {origin.scheme}://{origin.netloc}")
        return response
    link = session.get(LtiResourceLink, ticket["link"])
    assert link is not None
    link.assignment_id = assignment.id
    if _framed(request):  # no cookie of ours here: the next launch of the link opens it
        return _refused(request, f"This link now opens {assignment.title}: launch it again from {platform.name}.", 200,
                        "The link is set")
    log_in(request, session, user, get_context(request).settings.session_max_age_s)
    return see_other(_target(link, CourseRole.instructor))
