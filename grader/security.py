"""Two pure ASGI middlewares, wired in grader/app.py: secure response headers on every answer,
and forms accepted only from the service's own pages.

Pages load scripts and styles from /static only (no inline code), so the Content Security
Policy allows 'self' and nothing else; the OpenAPI explorers (/docs, /redoc) start with an
inline script and get no policy (their files come from /static/docs, never from a CDN). HSTS is sent only when the service is
deployed behind HTTPS (KG_SESSION_HTTPS_ONLY). API answers are never cached: they carry
private grades and logs. A redirect never names the Host the request gave (an absolute
Location to it becomes a path). The referrer policy is `same-origin`: no address of ours (a
reset link's token) reaches another site, and our own forms still carry their Origin (under
`no-referrer` a browser sends `Origin: null` with every form).

Forms (`SameOriginForms`): a POST (PUT, PATCH, DELETE) to a page must carry an Origin (else a
Referer) naming the service's own origin: KG_PUBLIC_URL's scheme://host[:port], or, when it
is unset, the request's own (grader.auth.client_address.request_origin). Another origin, or
`null` (a sandboxed frame, a page that hides its origin), is refused with a 403 page before the
route runs, even with a valid CSRF token. *Decision:* a request with neither header passes to
the CSRF check alone: every current browser sends Origin with a POST, so such a request does
not come from a browser page another site made, while scripts (curl, the token upload form
driven from a terminal) send neither. The API is not checked: a browser never sends its
bearer token by itself.
"""
from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grader.auth.client_address import request_origin

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=(), usb=()",
}
HSTS = "max-age=31536000; includeSubDomains"
EXPLORER_PATHS = ("/docs", "/redoc")


class SecureHeaders:
    def __init__(self, app: ASGIApp, https: bool) -> None:
        self.app = app
        self.https = https

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
                if not path.startswith(EXPLORER_PATHS):
                    headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
                if path.startswith("/api/"):
                    headers.setdefault("Cache-Control", "no-store")
                if self.https:
                    headers.setdefault("Strict-Transport-Security", HSTS)
                if "location" in headers:
                    headers["location"] = own_path(headers["location"], Headers(scope=scope).get("host", ""))
            await send(message)

        await self.app(scope, receive, send_with_headers)


def own_path(location: str, host: str) -> str:
    """A redirect to this service's own Host as a path (Starlette's trailing-slash redirect
    builds an absolute URL from the Host header, which the sender controls); others unchanged."""
    parts = urlsplit(location)
    if parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower():
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return location


UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
Refusal = Callable[[Request, str, str], Response]  # (request, origin sent, origin expected) -> 403 page


def origin_of(url: str) -> str:
    """scheme://host[:port] of an absolute URL, lower case ("null" stays "null"; "" when none)."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else url.strip().lower()


def sent_origin(headers: Headers) -> str | None:
    """The origin a request says it comes from: its Origin header, else its Referer's; None: neither."""
    if "origin" in headers:
        return origin_of(headers["origin"])
    if headers.get("referer"):
        return origin_of(headers["referer"])
    return None


class SameOriginForms:
    """Must run inside the session middleware (the refusal page shows the visitor's navigation)."""

    def __init__(self, app: ASGIApp, public_url: str, refusal: Refusal, cross_site: tuple[str, ...] = ()) -> None:
        self.app = app
        self.expected = origin_of(public_url) if public_url else None
        self.refusal = refusal
        self.cross_site = cross_site  # paths other sites post to by design (an LMS's LTI launch)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in UNSAFE_METHODS or scope["path"].startswith("/api/") \
                or scope["path"] in self.cross_site:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        sent = sent_origin(request.headers)
        expected = self.expected or request_origin(request)
        if sent is None or sent == expected:
            await self.app(scope, receive, send)
            return
        response = await run_in_threadpool(self.refusal, request, sent[:200], expected)
        await response(scope, receive, send)
