"""FastAPI application factory."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from sqlalchemy import text
from sqlalchemy.exc import DataError, OperationalError
from starlette.middleware.sessions import SessionMiddleware

from grader import api, pages
from grader.api.errors import error_response, install_error_handlers
from grader.api.text_rules import install_text_rules
from grader.auth.sessions import SESSION_COOKIE, secret_key
from grader.context import AppContext
from grader.control_chars import ControlCharacters
from grader.pages import lti, saml
from grader.pages.common import PageDenied, error_page, page_denied
from grader.pages.errors import install_error_pages, not_found_page, wants_page
from grader.ratelimit import UPLOAD_ROUTES, UploadRateLimit
from grader.security import SameOriginForms, SecureHeaders
from grader.settings import Settings, get_settings

# The forms other sites post by design (an LMS's launch, an identity provider's answer): their
# credential is what they carry, signed, never a session of ours
CROSS_SITE_POSTS = lti.CROSS_SITE_POSTS + saml.CROSS_SITE_POSTS


def create_app(settings: Settings | None = None) -> FastAPI:
    context = AppContext.from_settings(settings or get_settings())
    # /docs (Swagger UI) and /redoc load their scripts and styles from /static/docs, the files
    # the fastapi-offline package ships, not from a CDN: they work offline and behind a firewall.
    # (FastAPIOffline builds a FastAPI app with those two pages; everything else is FastAPI's.)
    app = FastAPIOffline(
        title="kernelgrade",
        version="0.1.0",
        description="Autograder for GPU kernel homework. Authenticate with `Authorization: Bearer <token>`.",
        static_url="/static/docs",
        swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from the validator's site
    )
    app.state.context = context
    # Middleware added last runs first: secure headers, then the session, then the forms' origin
    # check (its 403 page reads the session), then the per-student upload limit (it reads the
    # session to know the student), then the refusal of control characters in what is sent.
    app.add_middleware(ControlCharacters, refusal=_control_character, streamed=UPLOAD_ROUTES)
    app.add_middleware(UploadRateLimit, sessions=context.sessions, limit=context.settings.upload_rate_limit,
                       window_s=context.settings.upload_rate_window_s)
    app.add_middleware(SameOriginForms, public_url=context.settings.public_url, refusal=_foreign_form,
                       cross_site=CROSS_SITE_POSTS)
    # Signed cookie session: HttpOnly always, SameSite=Lax, Secure with KG_SESSION_HTTPS_ONLY.
    app.add_middleware(
        SessionMiddleware,
        secret_key=secret_key(context.settings),
        session_cookie=SESSION_COOKIE,
        max_age=context.settings.session_max_age_s,
        same_site="lax",
        https_only=context.settings.session_https_only,
    )
    app.add_middleware(SecureHeaders, https=context.settings.session_https_only)
    app.mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static")
    app.include_router(api.router)
    install_error_handlers(app)  # {"error": {code, message}} on /api/ paths
    install_text_rules(app)  # the rule on control characters, in the OpenAPI description
    install_error_pages(app)  # HTML error pages for browsers elsewhere; after the API's handlers, which it wraps
    app.add_exception_handler(DataError, _out_of_range)
    app.add_exception_handler(OperationalError, _database_down)
    app.add_exception_handler(PageDenied, page_denied)  # the pages' one refusal: login, 403 or 404 page
    for router in pages.routers:
        app.include_router(router)

    @app.get("/api/v1/health", tags=["v1"], summary="Database and broker reachability")
    def health() -> dict[str, Any]:
        return {"database": _database_ok(context), "broker": _broker_ok(context)}

    return app


def _foreign_form(request: Request, sent: str, expected: str) -> Response:
    """The 403 page of a form sent from another origin (grader.security.SameOriginForms)."""
    source = "a page that hides where it comes from" if sent == "null" else f"another site ({sent})"
    return error_page(request, 403, "Form refused",
                      f"This form was sent from {source}, not from a page of this service ({expected}), so nothing "
                      f"was done. If you meant to send it, open {expected} and send it from there.")


def _control_character(request: Request, why: str) -> Response:
    """The 422 answer to a request holding a control character (grader.control_chars)."""
    if request.url.path.startswith("/api/"):
        return error_response(422, why, "control_character")
    if wants_page(request):
        return error_page(request, 422, "Request not understood", f"{why} Nothing was changed.")
    return PlainTextResponse(why, status_code=422)


def _out_of_range(request: Request, exc: Exception) -> Response:
    """A value the database cannot hold (an id past its integer type) names nothing that
    exists: 404, not a server error."""
    if request.url.path.startswith("/api/"):
        return error_response(404, "not found: a value in the request is out of range")
    if wants_page(request):
        return not_found_page(request)
    return PlainTextResponse("Not Found", status_code=404)


def _database_down(request: Request, exc: Exception) -> Response:
    """The database is unreachable (restarting, say): 503 with Retry-After, so a client knows
    to send again; nothing of the request was recorded."""
    message = "the grading database is unavailable right now; nothing was recorded, send the request again shortly"
    if request.url.path.startswith("/api/"):
        return error_response(503, message, headers={"Retry-After": "10"})
    return PlainTextResponse(message, status_code=503, headers={"Retry-After": "10"})


def _database_ok(ctx: AppContext) -> bool:
    try:
        with ctx.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except Exception:
        return False


def _broker_ok(ctx: AppContext) -> bool:
    try:
        with ctx.celery.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True
    except Exception:
        return False
