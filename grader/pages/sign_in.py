"""What the single sign-on doors' pages share (grader.pages.sso for OpenID Connect,
grader.pages.saml for SAML 2.0): where the browser goes once logged in, the throttle of the
answers that logged nobody in (one door for both, per client address), the refusal recorded
and shown on the login page, and the login itself."""
from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from grader.auth.audit import Event, Via, record
from grader.auth.client_address import request_address
from grader.auth.logins import failed
from grader.auth.sessions import log_in
from grader.auth.sign_in import Person, SsoRefused
from grader.auth.throttle import Door, Throttle, address_key, refusal_words
from grader.context import AppContext
from grader.models import User
from grader.pages.common import login_refused, safe_next, see_other

_NEXT = "sso_next"  # where the browser goes once logged in, kept in its session meanwhile


def remember_next(request: Request, back: str) -> None:
    """Keep where the login page was asked to go, for the answer's request."""
    request.session[_NEXT] = safe_next(back)


def blocked(request: Request, ctx: AppContext, session: Session) -> Response | None:
    """The login page saying when to try again, while the client address is blocked by its
    refusals (refused unchecked, and not recorded); None when it is not."""
    block = Throttle(ctx.settings.throttle).blocked(session, [address_key(Door.sso, request_address(request))])
    if block is None:
        return None
    return login_refused(request, refusal_words(block, ctx.settings.course_zone), request.session.pop(_NEXT, "/"))


def refuse(request: Request, ctx: AppContext, session: Session, refused: SsoRefused, via: Via) -> Response:
    """Record the refusal and count it; the login page with its sentence."""
    address = request_address(request)
    failed(session, Throttle(ctx.settings.throttle), Event.login_failed, via, [address_key(Door.sso, address)],
           target=refused.user, typed=refused.login or "", address=address,
           detail=refused.detail or str(refused))
    return login_refused(request, str(refused), request.session.pop(_NEXT, "/"))


def logged_in(request: Request, ctx: AppContext, session: Session, user: User, person: Person, via: Via) -> Response:
    """Log `user` in (recorded with the identity that signed in) and go where the login page was
    asked to go."""
    user.note_first_login()
    record(session, Event.login, via, user=user, address=request_address(request),
           detail=person.identity.describe())
    back = safe_next(request.session.get(_NEXT))
    log_in(request, session, user, ctx.settings.session_max_age_s)
    return see_other(back)
