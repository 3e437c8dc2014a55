"""API tokens: random secrets shown once, stored as sha256 hashes, with scopes."""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import ApiToken, Role, User, utcnow

TOKEN_PREFIX = "kg_"

# What each scope allows. A student's token reads only its owner's submissions.
SCOPE_SUBMIT = "submit"
SCOPE_READ = "read"  # own submissions and runs
SCOPE_READ_ALL = "read:all"  # every submission (staff, CI)
SCOPE_REGRADE = "regrade"
DEFAULT_SCOPES: dict[Role, tuple[str, ...]] = {
    Role.student: (SCOPE_SUBMIT, SCOPE_READ),
    Role.instructor: (SCOPE_SUBMIT, SCOPE_READ, SCOPE_READ_ALL, SCOPE_REGRADE),
}


def hash_token(token: str) -> str:
    # Tokens are 256-bit random secrets, so a fast hash is enough (no guessing attack to slow).
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    user: User
    scopes: frozenset[str]

    def can(self, scope: str) -> bool:
        return scope in self.scopes

    def can_read_submission_of(self, owner_id: int) -> bool:
        return self.can(SCOPE_READ_ALL) or (self.can(SCOPE_READ) and owner_id == self.user.id)


def issue_token(session: Session, user: User, name: str, scopes: tuple[str, ...] | None = None) -> str:
    """Create a token for `user`; the plain token is returned once and never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    chosen = scopes if scopes is not None else DEFAULT_SCOPES[user.role]
    session.add(ApiToken(user=user, name=name, token_hash=hash_token(token), scopes=" ".join(chosen)))
    session.flush()
    return token


def authenticate(session: Session, token: str) -> Principal | None:
    row = session.scalar(
        select(ApiToken).where(ApiToken.token_hash == hash_token(token), ApiToken.revoked_at.is_(None))
    )
    if row is None:
        return None
    row.last_used_at = utcnow()
    return Principal(row.user, row.scope_set)
