"""Web passwords: Argon2id hashes through argon2-cffi at the cost the settings give
(grader.settings.Argon2Settings), the shortest password accepted, and a check that costs the
same for an unknown login as for a wrong password. Below the course rules (a roster import sets
passwords) and auth (the browser login checks them)."""
from __future__ import annotations

import functools
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.orm import Session

from grader.models import User
from grader.service import find_user
from grader.settings import Argon2Settings

MIN_PASSWORD_LENGTH = 8


@functools.cache
def _hasher(cost: Argon2Settings) -> PasswordHasher:
    return PasswordHasher(time_cost=cost.time_cost, memory_cost=cost.memory_kib, parallelism=cost.parallelism)


@functools.cache
def _dummy_hash(cost: Argon2Settings) -> str:
    """Verified when the username is unknown, so a wrong name costs the same time as a wrong password."""
    return _hasher(cost).hash(secrets.token_urlsafe(16))


def check_new_password(password: str, min_length: int = MIN_PASSWORD_LENGTH) -> None:
    """ValueError when `password` is shorter than `min_length` (never less than MIN_PASSWORD_LENGTH)."""
    min_length = max(min_length, MIN_PASSWORD_LENGTH)
    if len(password) < min_length:
        raise ValueError(f"a password needs at least {min_length} characters")


def set_password(user: User, password: str, cost: Argon2Settings, min_length: int = MIN_PASSWORD_LENGTH) -> None:
    """Store the password's Argon2id hash, made at `cost`; ValueError when it is too short
    (check_new_password). Sessions are ended by websession.change_password."""
    check_new_password(password, min_length)
    user.password_hash = _hasher(cost).hash(password)


def check_password(session: Session, username: str, password: str, cost: Argon2Settings) -> User | None:
    """The user if `password` is theirs; None otherwise (same work either way)."""
    return verify_password(find_user(session, username), password, cost)


def verify_password(user: User | None, password: str, cost: Argon2Settings) -> User | None:
    """`user` if `password` is theirs; None otherwise, also for no user (with the same work: a
    wrong name costs the same time as a wrong password). A right password whose hash was made at
    another cost than `cost` is hashed again at `cost`."""
    hasher = _hasher(cost)
    stored = user.password_hash if user is not None and user.password_hash else _dummy_hash(cost)
    try:
        hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return None
    if user is None or not user.password_hash:
        return None
    if hasher.check_needs_rehash(user.password_hash):
        user.password_hash = hasher.hash(password)
    return user
