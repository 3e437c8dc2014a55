"""Error answers a person in a browser can read.

Outside the REST API, a request that accepts text/html gets the site's error page
(templates/error.html) for an unknown address (404), an id that is not one (`/runs/abc`: 404),
a method the address does not take (405) and an invalid request (422). A GET of an address
that only takes a form (a reload, or the address typed again, after a failed POST) is sent
to the page around it: `/submit` to `/`, `/submissions/5/regrade` to `/submissions`.
The API under /api/, and clients that do not ask for HTML, keep the answers they had: the
handlers installed before these (grader.api's error envelope) answer them.
"""
from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from grader.api.errors import names_no_row
from grader.pages.common import error_page as titled_error_page
from grader.pages.common import page_around

API_PREFIX = "/api/"
Handler = Callable[[Request, Any], Response | Awaitable[Response]]

TITLES = {
    status.HTTP_404_NOT_FOUND: "Not found",
    status.HTTP_405_METHOD_NOT_ALLOWED: "Not a way to open this address",
    status.HTTP_422_UNPROCESSABLE_CONTENT: "Request not understood",
}


def wants_page(request: Request) -> bool:
    """A browser's request outside the API: it accepts HTML."""
    return not request.url.path.startswith(API_PREFIX) and "text/html" in request.headers.get("accept", "")


def error_page(request: Request, status_code: int, message: str, headers: dict[str, str] | None = None) -> HTMLResponse:
    return titled_error_page(request, status_code, TITLES.get(status_code, "Error"), message, headers)


def not_found_page(request: Request) -> HTMLResponse:
    return error_page(request, status.HTTP_404_NOT_FOUND, f"There is no page at {request.url.path}.")


def _http_message(request: Request, exc: StarletteHTTPException) -> str:
    if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
        return f"{request.url.path} does not take a {request.method} request."
    return str(exc.detail)


def _invalid_answer(request: Request, exc: RequestValidationError) -> HTMLResponse:
    """An address whose id is not one, or any id out of range, names nothing (404); other fields say
    what is wrong (422)."""
    errors = exc.errors()
    if names_no_row(exc) is not None or any(e.get("loc", ())[:1] == ("path",) for e in errors):
        return not_found_page(request)
    fields = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg', '')}" for e in errors)
    return error_page(request, status.HTTP_422_UNPROCESSABLE_CONTENT, f"The request was not understood ({fields}).")


async def _answer(handler: Handler, request: Request, exc: Exception) -> Response:
    answer = handler(request, exc)
    return await answer if inspect.isawaitable(answer) else answer


def install_error_pages(app: FastAPI) -> None:
    """Put the browser's answers in front of the handlers installed so far (call it after them)."""
    earlier_http: Handler = app.exception_handlers[StarletteHTTPException]
    earlier_invalid: Handler = app.exception_handlers[RequestValidationError]

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if not wants_page(request):
            return await _answer(earlier_http, request, exc)
        if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED and request.method in ("GET", "HEAD"):
            return RedirectResponse(page_around(app.router.routes, request.url.path), status.HTTP_303_SEE_OTHER)
        if exc.status_code == status.HTTP_404_NOT_FOUND:
            return not_found_page(request)
        return error_page(request, exc.status_code, _http_message(request, exc), getattr(exc, "headers", None))

    async def on_invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        if not wants_page(request):
            return await _answer(earlier_invalid, request, exc)
        return _invalid_answer(request, exc)

    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_invalid)
