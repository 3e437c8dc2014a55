"""Secure response headers on every answer (a pure ASGI middleware, wired in grader/app.py).

Pages load scripts and styles from /static only (no inline code), so the Content Security
Policy allows 'self' and nothing else; the OpenAPI explorers (/docs, /redoc) load their
bundles from a CDN and keep FastAPI's defaults instead. HSTS is sent only when the service is
deployed behind HTTPS (KG_SESSION_HTTPS_ONLY). API answers are never cached: they carry
private grades and logs.
"""
from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
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
            await send(message)

        await self.app(scope, receive, send_with_headers)
