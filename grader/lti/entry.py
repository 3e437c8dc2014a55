"""A launch shown inside the LMS's frame continues in a window of kernelgrade's own: in the
frame no cookie of ours can be set where the browser blocks third-party cookies, so the launch
answers there with a button that opens a one-time link (its token's sha256 kept on the launch's
state row, valid for the state's remaining minutes), and that link, opened as a first-party page,
logs the person in and goes where the launch was going."""
from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import LtiLaunchState, User, utcnow


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_entry(state: LtiLaunchState, user: User, target: str) -> str:
    """A one-time link's token for `user` to enter at `target` (a path of this site)."""
    token = secrets.token_urlsafe(32)
    state.entry_hash, state.entry_user_id, state.entry_target = _hash(token), user.id, target
    return token


def redeem_entry(db: Session, token: str, now: datetime | None = None) -> tuple[User, str] | None:
    """The person and the path of an unused, unexpired entry token (now used), else None."""
    now = now or utcnow()
    row = db.scalar(select(LtiLaunchState).where(LtiLaunchState.entry_hash == _hash(token)).with_for_update())
    if row is None or row.entered_at is not None or row.expires_at <= now or row.entry_user_id is None:
        return None
    row.entered_at = now
    user = db.get(User, row.entry_user_id)
    return (user, row.entry_target or "/") if user is not None else None
