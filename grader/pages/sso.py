"""The single sign-on button's two addresses (grader.auth.sso): /login/sso sends the browser to
the university's provider, /login/sso/callback logs in whoever the provider sends back. Both
exist only while KG_SSO_ISSUER is set (404 otherwise)."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from grader.api.deps import Context
from grader.auth.audit import Event, Via, record
from grader.auth.client_address import request_address
from grader.auth.logins import failed
from grader.auth.sessions import log_in
from grader.auth.sso import CALLBACK_PATH, Provider, SsoRefused, account_for, person_of
from grader.auth.throttle import Door, Throttle, address_key, refusal_words
from grader.context import AppContext
from grader.pages.common import Db, absent, login_refused, safe_next, see_other

router = APIRouter(include_in_schema=False)

_NEXT = "sso_next"  # where the browser goes once logged in, kept in its session meanwhile


def _provider(ctx: AppContext) -> Provider:
    if ctx.sso is None:
        raise absent("single sign-on on this service")
    return ctx.sso


@router.get("/login/sso")
async def start(request: Request, ctx: Context, session: Db,
                back: Annotated[str, Query(alias="next")] = "/") -> Response:
    """To the provider's sign-in page, or back to the login page saying why not (the provider
    cannot be reached)."""
    provider = _provider(ctx)
    request.session[_NEXT] = safe_next(back)
    try:
        return await provider.start(request)
    except SsoRefused as refused:
        return _refuse(request, ctx, session, refused)


@router.get(CALLBACK_PATH)
async def callback(request: Request, ctx: Context, session: Db) -> Response:
    """Logs in whoever the provider signed in (grader.auth.sso.account_for) and goes where the
    login page was asked to go; else the login page with the sentence saying why nobody was.
    Each refusal is recorded and counts towards the client address's throttle (the SSO door):
    an address blocked by its refusals is refused unchecked, and not recorded."""
    provider = _provider(ctx)
    throttle = Throttle(ctx.settings.throttle)
    block = throttle.blocked(session, [address_key(Door.sso, request_address(request))])
    if block is not None:
        return login_refused(request, refusal_words(block, ctx.settings.course_zone), request.session.pop(_NEXT, "/"))
    try:
        person = person_of(ctx.settings.sso, await provider.finish(request))
        user = account_for(session, person)
    except SsoRefused as refused:
        return _refuse(request, ctx, session, refused)
    user.note_first_login()
    record(session, Event.login, Via.sso, user=user, address=request_address(request),
           detail=person.identity.describe())
    back = safe_next(request.session.get(_NEXT))
    log_in(request, session, user, ctx.settings.session_max_age_s)
    return see_other(back)


def _refuse(request: Request, ctx: AppContext, session: Session, refused: SsoRefused) -> Response:
    """Record the refusal and count it; the login page with its sentence."""
    address = request_address(request)
    failed(session, Throttle(ctx.settings.throttle), Event.login_failed, Via.sso, [address_key(Door.sso, address)],
           target=refused.user, typed=refused.login or "", address=address,
           detail=refused.detail or str(refused))
    return login_refused(request, str(refused), request.session.pop(_NEXT, "/"))
