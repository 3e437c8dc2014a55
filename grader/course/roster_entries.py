"""What a course's roster says of its members, read from their enrollments (grader.models.Enrollment):
the name, section, Canvas and SIS ids the course's last roster import gave, and the address its
notices go to. Kept per course, so an import in one course never changes what another shows.

Where the roster gave no name, a course shows the account's display name (users.full_name, the
person's own); where it gave no address, the course's notices go to the account's own address
(users.email). Password reset links never go to a course's address: only to the account's
(grader.auth.password_reset).
"""
from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import Enrollment, User


def entry_of(session: Session, user_id: int, course_id: int | None) -> Enrollment | None:
    """The user's enrollment in the course; None when they are not in it (or there is no course)."""
    if course_id is None:
        return None
    return session.scalar(select(Enrollment).where(Enrollment.user_id == user_id, Enrollment.course_id == course_id))


def entries_of(session: Session, course_id: int | None, user_ids: Collection[int] | None = None) -> dict[int, Enrollment]:
    """user id -> their enrollment in the course (only `user_ids`' where given), one statement."""
    if course_id is None:
        return {}
    query = select(Enrollment).where(Enrollment.course_id == course_id)
    if user_ids is not None:
        query = query.where(Enrollment.user_id.in_(list(user_ids) or [-1]))
    return {entry.user_id: entry for entry in session.scalars(query)}


def shown_name(entry: Enrollment | None, user: User) -> str | None:
    """The name a course shows for the user: its roster's, else the account's display name."""
    return (entry.full_name if entry is not None else None) or user.full_name


def notice_address(entry: Enrollment | None, user: User) -> str | None:
    """Where a course's notices to the user go: its roster's address, else the account's own."""
    return (entry.email if entry is not None else None) or user.email
