"""The test LMS's HTTP routes: each reads the request whole, then runs in a worker thread (the
library's calls block: it fetches the tool's keys with `requests`) and hands the LTI work to
lms_lti's library classes. What the library leaves unchecked is checked here: the auth request's
fixed parameters, the client assertion's audience, subject and jti, the deep-linking response's
audience, deployment and data, and which scope each service operation needs."""
from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jwt
from lti1p3platform.exceptions import (
    InvalidKeySetUrl,
    LtiDeepLinkingResponseException,
    LtiException,
    MissingRequiredClaim,
    PreflightRequestValidationException,
    UnsupportedGrantType,
)
from lti1p3platform.framework.templates import template as launch_form
from lti1p3platform.registration import Registration
from lti1p3platform.response import Response as LibResponse
from lti1p3platform.response import generate_next_link
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.peers.lms_lti import (
    SCOPE_LINEITEM,
    SCOPE_LINEITEM_READ,
    SCOPE_RESULT_READ,
    SCOPE_SCORE,
    BadQuery,
    Incoming,
    Launch,
    LibRequest,
    Login,
    NotFound,
    Pending,
    Roster,
    ScopedAgs,
    paging_query,
)
from tests.peers.lms_model import Course

if TYPE_CHECKING:
    from tests.peers.lms import Platform

Handler = Callable[["Platform", Incoming], Response]

JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
SCOPE_NRPS = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
DL = "https://purl.imsglobal.org/spec/lti-dl/claim/"
DEPLOYMENT_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/deployment_id"
JWT_ERRORS = (LtiException, InvalidKeySetUrl, jwt.PyJWTError)


def refuse(status: int, why: str) -> Response:
    return PlainTextResponse(why, status_code=status)


def pending(platform: Platform, incoming: Incoming) -> Pending:
    found = platform.pending.get(incoming.path_params["hint"])
    if found is None:
        raise NotFound("no such launch")
    return found


# --- launches ---------------------------------------------------------------------------------
def start_launch(platform: Platform, incoming: Incoming) -> Response:
    """Third-party login initiation: send the browser to the tool's login URL."""
    launch = pending(platform, incoming)
    login = Login(None, platform.conf())
    login.set_lti_message_hint(hint=launch.hint)
    if launch.link is None:
        login.set_deeplinking_launch_url()
    elif launch.link.url:
        login.set_launch_url(launch.link.url)
    response: Response = login.initiate_login(launch.user.sub)
    return response


def framed(platform: Platform, incoming: Incoming) -> Response:
    launch = pending(platform, incoming)
    src = html.escape(f"{platform.issuer}/launch/{launch.hint}")
    title = html.escape(launch.link.title if launch.link else launch.course.title)
    return HTMLResponse(f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title></head>"
                        f"<body><h1>{title}</h1><iframe id='tool' title='{title}' src='{src}' "
                        "style='width:100%;height:80vh;border:0'></iframe></body></html>")


def authorize_launch(platform: Platform, incoming: Incoming) -> Response:
    """The OIDC authorization endpoint: the tool's authentication request, answered with the
    signed id_token in an auto-posting form to the registered launch URL."""
    params = {**incoming.query, **incoming.form}
    tool, urls = platform.registered()
    expected = {"response_type": "id_token", "response_mode": "form_post", "prompt": "none"}
    for name, value in expected.items():
        if params.get(name) != value:
            return refuse(400, f"{name} must be {value!r}, got {params.get(name)!r}")
    if "openid" not in params.get("scope", "").split():
        return refuse(400, "scope must include openid")
    if params.get("client_id") != tool.client_id:
        return refuse(400, f"unknown client_id {params.get('client_id')!r}")
    if params.get("redirect_uri") != urls.launch:
        return refuse(400, f"redirect_uri {params.get('redirect_uri')!r} is not the registered launch URL")
    if params.get("login_hint") not in platform.store.users:
        return refuse(400, f"login_hint {params.get('login_hint')!r} names no user")
    launch = platform.pending.get(params.get("lti_message_hint", ""))
    if launch is None or launch.user.sub != params["login_hint"]:
        return refuse(400, "lti_message_hint names no launch of this user")
    message = Launch(LibRequest(incoming, params), platform.conf(), launch, platform.store,
                     f"{platform.issuer}/deep_links/{launch.hint}", platform.stray_key, platform.record_issued)
    try:
        response: Response = message.lti_launch()
    except PreflightRequestValidationException:
        return refuse(400, "the authentication request needs nonce, state, redirect_uri and client_id")
    return response


def repost(platform: Platform, incoming: Incoming) -> Response:
    number = int(incoming.path_params["number"])
    if not 0 <= number < len(platform.issued):
        raise NotFound("no such launch")
    issued = platform.issued[number]
    return HTMLResponse(launch_form.render(launch_url=issued.redirect_uri, id_token=issued.id_token,
                                           state=issued.state))


def deep_link_return(platform: Platform, incoming: Incoming) -> Response:
    """The tool's deep-linking response: each ltiResourceLink item becomes a link in the course."""
    launch = pending(platform, incoming)
    tool, _ = platform.registered()
    if launch.link is not None:
        raise NotFound("not a deep-linking launch")
    token = incoming.form.get("JWT")
    if not token:
        return refuse(400, "the form has no JWT")
    conf = platform.conf()
    conf.set_accepted_deeplinking_types(["ltiResourceLink"])
    try:
        items = conf.validate_deeplinking_resp({"JWT": token})
        claims = conf.tool_validate_and_decode(token)
    except (*JWT_ERRORS, LtiDeepLinkingResponseException) as error:
        return refuse(400, f"deep-linking response refused: {error}")
    audience = claims.get("aud")
    checks = {
        "iss is not our client_id": claims.get("iss") != tool.client_id,
        "aud is not our issuer": platform.issuer not in (audience if isinstance(audience, list) else [audience]),
        "deployment_id is not ours": claims.get(DEPLOYMENT_CLAIM) != tool.deployment_id,
        "data is not what we sent": claims.get(DL + "data") != launch.hint,
        "a lineItem has no scoreMaximum above 0": any(
            "lineItem" in item and not (isinstance(item["lineItem"].get("scoreMaximum"), int | float)
                                        and item["lineItem"]["scoreMaximum"] > 0) for item in items),
    }
    problems = [why for why, failed in checks.items() if failed]
    if problems:
        return refuse(400, "deep-linking response refused: " + "; ".join(problems))
    made = [platform.create_deep_linked(launch.course, dict(item)) for item in items]
    rows = "".join(f"<li>{html.escape(link.title)}</li>" for link in made)
    return HTMLResponse(f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Links added</title>"
                        f"</head><body><h1>{len(made)} link(s) added</h1><ul>{rows}</ul></body></html>")


# --- keys and tokens --------------------------------------------------------------------------
def jwks(platform: Platform, incoming: Incoming) -> Response:
    return JSONResponse({"keys": [Registration.get_jwk(platform.key.public_pem)]})


def oauth_error(status: int, error: str, why: str) -> Response:
    return JSONResponse({"error": error, "error_description": why}, status_code=status)


def issue_token(platform: Platform, incoming: Incoming) -> Response:
    """client_credentials with a JWT client assertion (IMS Security Framework, section 4)."""
    form = incoming.form
    tool, _ = platform.registered()
    if form.get("client_assertion_type", JWT_BEARER) != JWT_BEARER:
        return oauth_error(400, "invalid_request", f"client_assertion_type must be {JWT_BEARER}")
    conf = platform.conf()
    try:
        answer = conf.get_access_token(dict(form))
        claims = conf.tool_validate_and_decode(form["client_assertion"])
    except MissingRequiredClaim as error:
        return oauth_error(400, "invalid_request", str(error))
    except UnsupportedGrantType:
        return oauth_error(400, "unsupported_grant_type", "grant_type must be client_credentials")
    except JWT_ERRORS as error:
        return oauth_error(401, "invalid_client", f"client assertion refused: {error}")
    audience = claims.get("aud")
    checks = {
        "iss and sub must be the client_id": not claims.get("iss") == claims.get("sub") == tool.client_id,
        "aud must name the token URL": tool.auth_token_url not in (
            audience if isinstance(audience, list) else [audience]),
        "exp is required": "exp" not in claims,
        "jti is required and used once": not platform.spend_jti(claims.get("jti")),
    }
    problems = [why for why, failed in checks.items() if failed]
    if problems:
        return oauth_error(401, "invalid_client", "; ".join(problems))
    if not answer["scope"]:
        return oauth_error(400, "invalid_scope", "none of the scopes asked for is offered")
    platform.keep_token(answer["access_token"])
    return JSONResponse(dict(answer))


def refused_token(platform: Platform, incoming: Incoming, scopes: list[str]) -> Response | None:
    """401 for a missing, forged, expired or revoked bearer token; 403 for one without the scope."""
    parts = incoming.headers.get("authorization", "").split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return refuse(401, "a bearer token is required")
    conf = platform.conf()
    try:
        valid = conf.validate_token(parts[1]) and parts[1] in platform.live_tokens
    except JWT_ERRORS:
        valid = False
    if not valid:
        return PlainTextResponse("invalid token", 401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    if not conf.validate_token(parts[1], scopes):
        return PlainTextResponse("the token lacks the scope", 403,
                                 headers={"WWW-Authenticate": 'Bearer error="insufficient_scope"'})
    return None


def answer(response: LibResponse) -> Response:
    """The library's service answer as HTTP: a page of a container as its JSON array (or the
    membership container without its `next`) with the next page in a Link header."""
    if response.code >= 400:
        return JSONResponse({"error": response.message}, status_code=response.code)
    if response.result is None:
        return Response(status_code=response.code)
    body: Any = response.result
    following = body.pop("next", None) if isinstance(body, dict) else None
    if isinstance(body, dict) and "content" in body:
        body = body["content"]
    headers = {"Link": generate_next_link(following)} if following else None
    return JSONResponse(body, status_code=response.code, headers=headers, media_type=response.media_type)


# --- AGS and NRPS -----------------------------------------------------------------------------
def course(platform: Platform, incoming: Incoming) -> Course:
    found = platform.store.courses.get(int(incoming.path_params["course"]))
    if found is None:
        raise NotFound("no such course")
    return found


def ags(platform: Platform, incoming: Incoming, scopes: list[str], keys: tuple[str, ...] = (),
        media_type: str | None = None) -> ScopedAgs | Response:
    refused = refused_token(platform, incoming, scopes)
    if refused is not None:
        return refused
    if media_type and incoming.content_type != media_type:
        return refuse(415, f"the body must be {media_type}")
    where = course(platform, incoming)
    item = incoming.path_params.get("item")
    return ScopedAgs(LibRequest(incoming, paging_query(incoming, keys)), platform.conf(), platform.store, where,
                     scopes, platform.before_score, platform.store.lineitems_url(where) + f"/{item}" if item else None)


def lineitems(platform: Platform, incoming: Incoming) -> Response:
    if incoming.method == "POST":
        service = ags(platform, incoming, [SCOPE_LINEITEM], media_type=LINEITEM_TYPE)
        return service if isinstance(service, Response) else answer(service.handle_resp(service.handle_create_lineitem))
    service = ags(platform, incoming, [SCOPE_LINEITEM, SCOPE_LINEITEM_READ],
                  keys=("page", "limit", "resource_link_id", "resource_id", "tag"))
    return service if isinstance(service, Response) else answer(service.handle_resp(service.handle_get_lineitems))


def lineitem(platform: Platform, incoming: Incoming) -> Response:
    key = incoming.path_params["item"]
    if incoming.method == "GET":
        service = ags(platform, incoming, [SCOPE_LINEITEM, SCOPE_LINEITEM_READ])
        handler = "handle_get_lineitem"
    elif incoming.method == "PUT":
        service = ags(platform, incoming, [SCOPE_LINEITEM], media_type=LINEITEM_TYPE)
        handler = "handle_update_lineitem"
    else:
        service = ags(platform, incoming, [SCOPE_LINEITEM])
        handler = "handle_delete_lineitem"
    if isinstance(service, Response):
        return service
    return answer(service.handle_resp(getattr(service, handler), line_item_id=key))


def scores(platform: Platform, incoming: Incoming) -> Response:
    service = ags(platform, incoming, [SCOPE_SCORE], media_type=SCORE_TYPE)
    if isinstance(service, Response):
        return service
    return answer(service.handle_resp(service.handle_update_score, line_item_id=incoming.path_params["item"]))


def results(platform: Platform, incoming: Incoming) -> Response:
    service = ags(platform, incoming, [SCOPE_RESULT_READ], keys=("page", "limit", "user_id"))
    if isinstance(service, Response):
        return service
    return answer(service.handle_resp(service.handle_get_results, line_item_id=incoming.path_params["item"]))


def memberships(platform: Platform, incoming: Incoming) -> Response:
    refused = refused_token(platform, incoming, [SCOPE_NRPS])
    if refused is not None:
        return refused
    query = paging_query(incoming, ("page", "limit", "role", "since", "rlid"), platform.nrps_page_size)
    roster = Roster(LibRequest(incoming, query), platform.conf(), platform.store, course(platform, incoming))
    return answer(roster.handle_resp(roster.handle_get_members))


ROUTES: list[tuple[str, Handler, list[str]]] = [
    ("/jwks", jwks, ["GET"]),
    ("/launch/{hint}", start_launch, ["GET"]),
    ("/framed/{hint}", framed, ["GET"]),
    ("/auth", authorize_launch, ["GET", "POST"]),
    ("/repost/{number:int}", repost, ["GET"]),
    ("/deep_links/{hint}", deep_link_return, ["POST"]),
    ("/token", issue_token, ["POST"]),
    ("/courses/{course:int}/lineitems", lineitems, ["GET", "POST"]),
    ("/courses/{course:int}/lineitems/{item}", lineitem, ["GET", "PUT", "DELETE"]),
    ("/courses/{course:int}/lineitems/{item}/scores", scores, ["POST"]),
    ("/courses/{course:int}/lineitems/{item}/results", results, ["GET"]),
    ("/courses/{course:int}/memberships", memberships, ["GET"]),
]


def build_app(platform: Platform) -> Starlette:
    def route(path: str, handler: Handler, methods: list[str]) -> Route:
        async def endpoint(request: Request) -> Response:
            body = await request.body()
            form: dict[str, str] = {}
            if request.method == "POST" and request.headers.get("content-type", "").startswith(
                    ("application/x-www-form-urlencoded", "multipart/form-data")):
                form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
            incoming = Incoming(request.method, {k: str(v) for k, v in request.path_params.items()},
                                dict(request.query_params), form, request.headers, body)
            return await run_in_threadpool(handle, handler, incoming)
        return Route(path, endpoint, methods=methods)

    def handle(handler: Handler, incoming: Incoming) -> Response:
        try:
            return handler(platform, incoming)
        except NotFound as error:
            return refuse(404, str(error))
        except BadQuery as error:
            return refuse(400, str(error))

    return Starlette(routes=[route(path, handler, methods) for path, handler, methods in ROUTES])
