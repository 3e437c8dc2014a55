"""Per-student upload rate limit (a pure ASGI middleware, wired in grader/app.py).

Every upload route counts towards its sender: the API (`POST /api/v1/submissions`, by the
bearer token's user), the logged-in form (`POST /submit`, by the session's user) and the
token form (`POST /upload`: its token is inside the body, so by client address, found as
grader/auth/client_address.py says). At most `limit` attempts in any window of `window_s`
seconds; the next answers 429 with Retry-After before a byte of the upload is read. Counted in memory, per web process: several processes
each allow `limit`. A request with no usable identity passes through and the route refuses it.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import anyio
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from grader.auth.client_address import request_address
from grader.auth.credentials import hash_token
from grader.models import ApiToken

UPLOAD_ROUTES = {("POST", "/api/v1/submissions"), ("POST", "/submit"), ("POST", "/upload")}


class SlidingWindow:
    """At most `limit` hits per key in any `window_s` seconds (a log of hit times per key)."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: str) -> float | None:
        """Count a hit for `key`: None when allowed, else the seconds until one would be."""
        now = self.clock()
        with self._lock:
            hits = self._hits.setdefault(key, deque())
            while hits and hits[0] <= now - self.window_s:
                hits.popleft()
            if len(hits) >= self.limit:
                return hits[0] + self.window_s - now
            hits.append(now)
            if len(self._hits) > 10 * self.limit + 10_000:  # drop keys whose hits have all expired
                self._hits = {k: v for k, v in self._hits.items() if v and v[-1] > now - self.window_s}
            return None


class UploadRateLimit:
    """Must run inside the session middleware (it reads `scope["session"]`)."""

    def __init__(self, app: ASGIApp, sessions: sessionmaker[Session], limit: int, window_s: float) -> None:
        self.app = app
        self.sessions = sessions
        self.window = SlidingWindow(limit, window_s) if limit > 0 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.window is None or scope["type"] != "http" or (scope["method"], scope["path"]) not in UPLOAD_ROUTES:
            await self.app(scope, receive, send)
            return
        key = await self._sender(scope)
        retry_after = self.window.hit(key) if key is not None else None
        if retry_after is None:
            await self.app(scope, receive, send)
            return
        await _too_many(scope["path"], retry_after, self.window)(scope, receive, send)

    async def _sender(self, scope: Scope) -> str | None:
        if scope["path"] == "/submit":
            uid = scope.get("session", {}).get("uid")
            return f"user:{uid}" if isinstance(uid, int) else None
        if scope["path"] == "/upload":
            return f"address:{request_address(HTTPConnection(scope))}"
        for name, value in scope["headers"]:
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                token = value[7:].decode("latin-1").strip()
                uid = await anyio.to_thread.run_sync(self._token_owner, token)
                return f"user:{uid}" if uid is not None else None
        return None

    def _token_owner(self, token: str) -> int | None:
        """The token's user; None when unknown, or when the database cannot say (the route
        then answers for itself, e.g. 503 while the database is down)."""
        try:
            with self.sessions() as session:
                return session.scalar(select(ApiToken.user_id).where(ApiToken.token_hash == hash_token(token),
                                                                    ApiToken.revoked_at.is_(None)))
        except SQLAlchemyError:
            return None


def _too_many(path: str, retry_after: float, window: SlidingWindow) -> Response:
    wait = max(1, int(retry_after + 0.999))
    message = (f"too many uploads: at most {window.limit} in {window.window_s:g} s per student; "
               f"try again in {wait} s")
    headers = {"Retry-After": str(wait)}
    if path.startswith("/api/"):
        return JSONResponse({"error": {"code": "too_many_requests", "message": message}}, 429, headers=headers)
    return HTMLResponse(f"<!doctype html><title>Too many uploads</title><p>{message.capitalize()}.</p>",
                        429, headers=headers)
