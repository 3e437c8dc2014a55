"""API tokens (random secrets shown once, stored as sha256 hashes, with scopes) and web
passwords (Argon2id through argon2-cffi)."""
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.course.membership import roles_of, staff_anywhere
from grader.models import ApiToken, CourseRole, Role, Submission, User, utcnow
from grader.roles import Power, may

TOKEN_PREFIX = "kg_"

# What each scope allows, within the roles of the token's owner (Principal). A student's token
# reads only its owner's submissions.
SCOPE_SUBMIT = "submit"
SCOPE_READ = "read"  # own submissions and runs
SCOPE_READ_ALL = "read:all"  # every submission of the courses the owner is staff of (Power.view)
SCOPE_REGRADE = "regrade"  # re-grade and answer requests there (Power.grade)
SCOPE_MANAGE = "manage"  # change the TA powers and run quotas of the courses the owner instructs (Power.manage)
ALL_SCOPES = (SCOPE_SUBMIT, SCOPE_READ, SCOPE_READ_ALL, SCOPE_REGRADE, SCOPE_MANAGE)
STUDENT_SCOPES = (SCOPE_SUBMIT, SCOPE_READ)
# The scope a token needs to use a staff power through the API (a TA's granted powers have no route).
SCOPE_OF_POWER = {Power.view: SCOPE_READ_ALL, Power.grade: SCOPE_REGRADE, Power.manage: SCOPE_MANAGE}


def scopes_for(session: Session, user: User) -> tuple[str, ...]:
    """The scopes `user`'s tokens may carry, by role: every scope for the staff (instructor or
    TA) of some course and for an account that may make courses (site role instructor);
    a student's otherwise."""
    return ALL_SCOPES if user.role is Role.instructor or staff_anywhere(session, user.id) else STUDENT_SCOPES


def hash_token(token: str) -> str:
    # Tokens are 256-bit random secrets, so a fast hash is enough (no guessing attack to slow).
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who acts (a token's owner, or a logged-in browser's user), what the token allows, and
    the user's part in each assignment (grader.course.membership): a scope only ever acts within
    the assignments that part covers."""

    user: User
    scopes: frozenset[str]
    roles: Mapping[int, CourseRole] = field(default_factory=dict)  # assignment id -> role in its course

    def can(self, scope: str) -> bool:
        return scope in self.scopes

    def member_of(self, assignment_id: int) -> bool:
        return assignment_id in self.roles

    def teaches(self, assignment_id: int) -> bool:
        """Staff (instructor or TA) of the assignment's course."""
        role = self.roles.get(assignment_id)
        return role is not None and role.is_staff

    def can_read_all_of(self, assignment_id: int) -> bool:
        """Every submission of the assignment: staff there, with a token that reads all."""
        return self.can(SCOPE_READ_ALL) and may(self.roles.get(assignment_id), Power.view)

    def can_read_submission(self, submission: Submission) -> bool:
        own = submission.user_id == self.user.id and self.member_of(submission.assignment_id)
        return self.can_read_all_of(submission.assignment_id) or (self.can(SCOPE_READ) and own)


def principal_for(session: Session, user: User, scopes: frozenset[str]) -> Principal:
    return Principal(user, scopes, roles_of(session, user.id))


def browser_principal(session: Session, user: User) -> Principal:
    """A logged-in browser acts as its user, with every scope: the memberships alone limit it."""
    return principal_for(session, user, frozenset(ALL_SCOPES))


def issue_token(session: Session, user: User, name: str, scopes: tuple[str, ...] | None = None) -> str:
    """Create a token for `user`; the plain token is returned once and never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    chosen = scopes if scopes is not None else scopes_for(session, user)
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
    row.user.note_first_login()  # a token of theirs in use: the account is its person's
    return principal_for(session, row.user, row.scope_set)
