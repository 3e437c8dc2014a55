"""The SAML button's three addresses (grader.auth.saml): /login/saml sends the browser to the
university's identity provider, /saml/acs logs in whoever the provider's posted answer names,
and /saml/metadata is this service's metadata for the provider's administrators. All three
exist only while KG_SAML_IDP_METADATA_URL (or _FILE) is set (404 otherwise).

The provider posts its answer from its own site, and the session cookie is SameSite=Lax: a
browser sends it with that post only where the provider is on the same site as this service.
Where it did not, the answer comes back as a page of ours that posts it again, from this
origin, with the cookie (its script, else its button); the page writes nothing into the
session, so the cookie the browser holds is the one that comes back."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from grader.api.deps import Context
from grader.auth.audit import Via
from grader.auth.saml import ACS_PATH, METADATA_PATH, PENDING, START_PATH, ServiceProvider
from grader.auth.sign_in import SsoRefused, account_for
from grader.context import AppContext
from grader.pages.common import Db, absent, templates
from grader.pages.sign_in import blocked, logged_in, refuse, remember_next

router = APIRouter(include_in_schema=False)

CROSS_SITE_POSTS = (ACS_PATH,)  # the identity provider posts here: grader.security.SameOriginForms lets it in
RESENT = "kg_resent"  # the field of our own page's second post of an answer


def _sp(ctx: AppContext) -> ServiceProvider:
    if ctx.saml is None:
        raise absent("SAML single sign-on on this service")
    return ctx.saml


@router.get(START_PATH)
async def start(request: Request, ctx: Context, session: Db,
                back: Annotated[str, Query(alias="next")] = "/") -> Response:
    """To the provider's sign-in page, or back to the login page saying why not (its metadata
    cannot be read)."""
    sp = _sp(ctx)
    remember_next(request, back)
    try:
        return RedirectResponse(await run_in_threadpool(sp.start, request.session), status_code=302)
    except SsoRefused as refused:
        return refuse(request, ctx, session, refused, Via.saml)


@router.post(ACS_PATH)
async def acs(request: Request, ctx: Context, session: Db) -> Response:
    """Logs in whoever the provider's checked answer names (grader.auth.sign_in.account_for)
    and goes where the login page was asked to go; else the login page with the sentence saying
    why nobody was. Refusals are recorded and throttled per client address as single sign-on's."""
    sp = _sp(ctx)
    form = await request.form()
    answer, relay = str(form.get("SAMLResponse", "")), str(form.get("RelayState", ""))
    if PENDING not in request.session and not form.get(RESENT):
        fields = [("SAMLResponse", answer), (RESENT, "1")] + ([("RelayState", relay)] if relay else [])
        return templates.TemplateResponse(request, "saml_continue.html", {"action": ACS_PATH, "fields": fields})
    if (wait := blocked(request, ctx, session)) is not None:
        return wait
    try:
        person = await run_in_threadpool(sp.finish, request.session, answer)
        user = account_for(session, person, Via.saml)
    except SsoRefused as refused:
        return refuse(request, ctx, session, refused, Via.saml)
    return logged_in(request, ctx, session, user, person, Via.saml)


@router.get(METADATA_PATH)
async def metadata(ctx: Context) -> Response:
    """This service's SAML metadata: its entity id, its ACS and its certificate."""
    sp = _sp(ctx)
    return Response(await run_in_threadpool(sp.metadata), media_type="application/samlmetadata+xml")
