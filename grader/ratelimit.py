"""Per-student upload rate limit (a pure ASGI middleware, wired in grader/app.py).

Every upload route counts towards its sender: the API (`POST /api/v1/submissions`, by the
bearer token's user), the logged-in form (`POST /submit`, by the session's user) and the
token form (`POST /upload`: its token is inside the body, so by client address, found as
grader/auth/client_address.py says). At most `limit` attempts in any window of `window_s`
seconds; the next answers 429 with Retry-After before a byte of the upload is read. Counted in
the database (`SharedWindow`), so several web processes share one limit (issue 54: each process
used to allow `limit`). A request with no usable identity passes through and the route refuses it.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta

import anyio
from sqlalchemy import delete, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from grader.auth.client_address import request_address
from grader.auth.credentials import hash_token
from grader.db import session_scope
from grader.models import ApiToken, UploadHit, utcnow

UPLOAD_ROUTES = {("POST", "/api/v1/submissions"), ("POST", "/submit"), ("POST", "/upload")}


class SharedWindow:
    """At most `limit` hits per sender in any `window_s` seconds, counted in the database
    (upload_hits: a row per hit, kept one window), so every web process, on any host, shares the
    counts. One sender's hits are counted one request at a time: PostgreSQL holds a transaction
    lock on the sender; SQLite's first write (the clearing of the sender's old hits) takes its
    write lock, which other writers wait for."""

    def __init__(self, sessions: sessionmaker[Session], limit: int, window_s: float,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.sessions, self.limit, self.window_s, self.clock = sessions, limit, window_s, clock

    def hit(self, sender: str) -> float | None:
        """Count a hit for `sender`: None when allowed, else the seconds until one would be."""
        now, window = self.clock(), timedelta(seconds=self.window_s)
        with session_scope(self.sessions) as session:
            if session.get_bind().dialect.name == "postgresql":
                key = int.from_bytes(hashlib.sha256(sender.encode()).digest()[:8], "big", signed=True)
                session.execute(select(func.pg_advisory_xact_lock(key)))
            session.execute(delete(UploadHit).where(UploadHit.sender == sender, UploadHit.at <= now - window))
            oldest = list(session.scalars(select(UploadHit.at).where(UploadHit.sender == sender)
                                          .order_by(UploadHit.at).limit(self.limit)))
            if len(oldest) >= self.limit:
                return (oldest[0] + window - now).total_seconds()
            session.add(UploadHit(sender=sender, at=now))
        return None


class UploadRateLimit:
    """Must run inside the session middleware (it reads `scope["session"]`)."""

    def __init__(self, app: ASGIApp, sessions: sessionmaker[Session], limit: int, window_s: float) -> None:
        self.app = app
        self.sessions = sessions
        self.window = SharedWindow(sessions, limit, window_s) if limit > 0 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.window is None or scope["type"] != "http" or (scope["method"], scope["path"]) not in UPLOAD_ROUTES:
            await self.app(scope, receive, send)
            return
        key = await self._sender(scope)
        retry_after = await anyio.to_thread.run_sync(self._hit, key) if key is not None else None
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

    def _hit(self, sender: str) -> float | None:
        """The window's answer; None (let it through) when the database cannot say: the route
        then answers for itself, e.g. 503 while the database is down."""
        assert self.window is not None
        try:
            return self.window.hit(sender)
        except SQLAlchemyError:
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


def _too_many(path: str, retry_after: float, window: SharedWindow) -> Response:
    wait = max(1, int(retry_after + 0.999))
    message = (f"too many uploads: at most {window.limit} in {window.window_s:g} s per student; "
               f"try again in {wait} s")
    headers = {"Retry-After": str(wait)}
    if path.startswith("/api/"):
        return JSONResponse({"error": {"code": "too_many_requests", "message": message}}, 429, headers=headers)
    return HTMLResponse(f"<!doctype html><title>Too many uploads</title><p>{message.capitalize()}.</p>",
                        429, headers=headers)
