"""Browser sessions and CSRF tokens.

The session is Starlette's signed cookie (HttpOnly, SameSite=Lax, `Secure` when
KG_SESSION_HTTPS_ONLY is set, expiring after KG_SESSION_MAX_AGE_S). It holds:
  uid   the logged-in user's id
  pwv   a fingerprint of the user's password hash: a password change ends every session
  sid   a random id, new at every login and logout (nothing from before login survives)
  csrf  the form token, also new at every login and logout

Every POST form carries `csrf_token` in a hidden field, compared in constant time with the
session's. Anonymous visitors get a token too, so the login form is covered as well.
"""
from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from fastapi import Request
from sqlalchemy.orm import Session

from grader.auth import password_fingerprint
from grader.models import User
from grader.settings import Settings

CSRF_FIELD = "csrf_token"
SESSION_COOKIE = "kg_session"


class CsrfError(Exception):
    """The form's token is missing or is not this session's."""


def secret_key(settings: Settings) -> str:
    """KG_SECRET_KEY, or a random key created once under the data folder (embedded default)."""
    if settings.secret_key:
        return settings.secret_key
    path = Path(settings.data_dir) / "secret_key"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        key = secrets.token_urlsafe(48)
        fh.write(key)
    return key


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not isinstance(token, str) or not token:
        token = request.session["csrf"] = secrets.token_urlsafe(32)
    return token


def check_csrf(request: Request, sent: object) -> None:
    expected = request.session.get("csrf")
    if not isinstance(sent, str) or not isinstance(expected, str) or not expected:
        raise CsrfError
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfError


def log_in(request: Request, user: User) -> None:
    """Replace the whole session (against fixation): new id, new CSRF token."""
    request.session.clear()
    request.session.update(
        uid=user.id, pwv=password_fingerprint(user), sid=secrets.token_urlsafe(16), csrf=secrets.token_urlsafe(32)
    )


def log_out(request: Request) -> None:
    request.session.clear()
    request.session.update(sid=secrets.token_urlsafe(16), csrf=secrets.token_urlsafe(32))


def current_user(request: Request, session: Session) -> User | None:
    uid = request.session.get("uid")
    if not isinstance(uid, int):
        return None
    user = session.get(User, uid)
    if user is None or not user.password_hash or request.session.get("pwv") != password_fingerprint(user):
        return None
    return user
