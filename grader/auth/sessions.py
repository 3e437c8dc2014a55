"""Browser sessions (server-side) and CSRF tokens.

A login creates a row of `web_sessions` (grader.models.WebSession) holding the sha256 of a
random 256-bit session id; the id itself travels only in Starlette's signed cookie
(HttpOnly, SameSite=Lax, `Secure` when KG_SESSION_HTTPS_ONLY is set), which holds:
  sid  the session id; an anonymous visitor's names no row
  uid  the logged-in user's id, only so that the upload rate limit (grader/ratelimit.py, run
       before any route) can count per student; it grants nothing: every request looks the
       sid up, and a missing, revoked or expired row is anonymous whatever the cookie says
A session is revoked at logout; a password change (`change_password`) or an instructor
(`grader user logout-all`) revokes every session of the user. It slides: it ends after
KG_SESSION_IDLE_S without a request (each request renews it: `last_seen_at`, written at most
once per `seen_resolution`, a small share of the idle limit), and KG_SESSION_MAX_AGE_S after login however much it is used (a stolen cookie
cannot be kept alive for ever). The id is new at every login and logout, so nothing from
before login survives (fixation).

Every POST form carries `csrf_token` in a hidden field: an HMAC of the session id, compared
in constant time. Anonymous visitors get a session id too, so the login form is covered.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from datetime import timedelta

from fastapi import Request
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, joinedload

from grader.models import User, WebSession, utcnow
from grader.passwords import MIN_PASSWORD_LENGTH, set_password
from grader.settings import Argon2Settings, Settings, refuse_exposed

CSRF_FIELD = "csrf_token"
SESSION_COOKIE = "kg_session"
_CSRF_LABEL = b"kernelgrade csrf v1"
# last_seen_at is written at most once per this share of the idle limit, and at most once a
# minute, per session (not on every request)
_SEEN_SHARE = 20
_SEEN_MAX = timedelta(minutes=1)


class CsrfError(Exception):
    """The form's token is missing or is not this session's."""


def secret_key(settings: Settings) -> str:
    """KG_SECRET_KEY, or a random key created once under the data folder (embedded default); one
    that other users of the host can read is refused (ExposedSecretFile)."""
    if settings.secret_key:
        return settings.secret_key
    path = settings.secret_key_path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        refuse_exposed(path)
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        key = secrets.token_urlsafe(48)
        fh.write(key)
    return key


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _session_id(request: Request) -> str | None:
    sid = request.session.get("sid")
    return sid if isinstance(sid, str) and sid else None


def csrf_token(request: Request) -> str:
    sid = _session_id(request)
    if sid is None:
        sid = request.session["sid"] = secrets.token_urlsafe(32)
    return hmac.new(sid.encode(), _CSRF_LABEL, hashlib.sha256).hexdigest()


def check_csrf(request: Request, sent: object) -> None:
    if not isinstance(sent, str) or _session_id(request) is None:
        raise CsrfError
    if not hmac.compare_digest(sent.encode(), csrf_token(request).encode()):
        raise CsrfError


def _revoke_current(request: Request, db: Session) -> None:
    sid = _session_id(request)
    if sid is not None:
        db.execute(update(WebSession).where(WebSession.id_hash == _hash(sid), WebSession.revoked_at.is_(None))
                   .values(revoked_at=utcnow()))


def log_in(request: Request, db: Session, user: User, lifetime_s: int) -> None:
    """A new session for `user` under a new id; the cookie's previous session ends. The
    user's expired sessions are deleted on the way."""
    _revoke_current(request, db)
    now = utcnow()
    db.execute(delete(WebSession).where(WebSession.user_id == user.id, WebSession.expires_at <= now))
    sid = secrets.token_urlsafe(32)
    db.add(WebSession(user_id=user.id, id_hash=_hash(sid), created_at=now, last_seen_at=now,
                      expires_at=now + timedelta(seconds=lifetime_s)))
    request.session.clear()
    request.session.update(sid=sid, uid=user.id)


def log_out(request: Request, db: Session) -> None:
    _revoke_current(request, db)
    request.session.clear()
    request.session["sid"] = secrets.token_urlsafe(32)


def revoke_user_sessions(db: Session, user_id: int) -> int:
    """End every live session of the user; returns how many there were."""
    now = utcnow()
    result = db.execute(
        update(WebSession)
        .where(WebSession.user_id == user_id, WebSession.revoked_at.is_(None), WebSession.expires_at > now)
        .values(revoked_at=now)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def change_password(db: Session, user: User, password: str, cost: Argon2Settings,
                    min_length: int = MIN_PASSWORD_LENGTH) -> None:
    """Set the password, hashed at `cost` (ValueError when too short), and end every session of
    the user. It is no course's first password (grader.auth.set_up): the person, a link or the
    operator set it."""
    set_password(user, password, cost, min_length)
    user.password_set_up_by_course_id = None
    revoke_user_sessions(db, user.id)


def seen_resolution(idle: timedelta) -> timedelta:
    """How stale `last_seen_at` may grow before a request writes it again. The recorded
    activity lags the real one by up to this much, so a session can end this much early: a
    twentieth of the idle limit (3 s of a 60 s limit) keeps the lag small for a short limit,
    and the minute cap keeps it small for a long one, while still sparing a write per request."""
    return min(idle / _SEEN_SHARE, _SEEN_MAX)


def current_user(request: Request, db: Session) -> User | None:
    """The user of the cookie's session while it is live (not revoked, not idle for
    KG_SESSION_IDLE_S, not past its absolute expiry), else None; a live session is renewed."""
    sid = _session_id(request)
    row = None
    now = utcnow()
    idle = timedelta(seconds=request.app.state.context.settings.session_idle_s)
    if sid is not None:
        row = db.scalar(select(WebSession).options(joinedload(WebSession.user))
                        .where(WebSession.id_hash == _hash(sid), WebSession.revoked_at.is_(None),
                               WebSession.expires_at > now, WebSession.last_seen_at > now - idle))
    if row is None:
        request.session.pop("uid", None)
        return None
    if now - row.last_seen_at >= seen_resolution(idle):
        row.last_seen_at = now
    return row.user
