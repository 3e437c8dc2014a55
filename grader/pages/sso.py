"""The single sign-on button's two addresses (grader.auth.sso): /login/sso sends the browser to
the university's provider, /login/sso/callback logs in whoever the provider sends back. Both
exist only while KG_SSO_ISSUER is set (404 otherwise)."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from grader.api.deps import Context
from grader.auth.audit import Via
from grader.auth.sign_in import SsoRefused, account_for
from grader.auth.sso import CALLBACK_PATH, Provider, person_of
from grader.context import AppContext
from grader.pages.common import Db, absent
from grader.pages.sign_in import blocked, logged_in, refuse, remember_next

router = APIRouter(include_in_schema=False)


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
    remember_next(request, back)
    try:
        return await provider.start(request)
    except SsoRefused as refused:
        return refuse(request, ctx, session, refused, Via.sso)


@router.get(CALLBACK_PATH)
async def callback(request: Request, ctx: Context, session: Db) -> Response:
    """Logs in whoever the provider signed in (grader.auth.sign_in.account_for) and goes where
    the login page was asked to go; else the login page with the sentence saying why nobody
    was. Each refusal is recorded and counts towards the client address's throttle (the SSO
    door): an address blocked by its refusals is refused unchecked, and not recorded."""
    provider = _provider(ctx)
    if (wait := blocked(request, ctx, session)) is not None:
        return wait
    try:
        person = person_of(ctx.settings.sso, await provider.finish(request))
        user = account_for(session, person, Via.sso)
    except SsoRefused as refused:
        return refuse(request, ctx, session, refused, Via.sso)
    return logged_in(request, ctx, session, user, person, Via.sso)
