"""Who belongs to which assignment, and as what (the `enrollments` table).

A student of an assignment submits to it and reads their own submissions there; staff of an
assignment read, re-grade and export everyone's work in it, and upload to it outside the
schedule and quota. Nobody sees an assignment they are not enrolled in: to them it reads as
absent. The account's own role (User.role) only says which API scopes its tokens may carry
(grader.auth.credentials) and which part a new account takes by default (`course_role_for`).
"""
from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import Assignment, CourseRole, Enrollment, Role, User


def course_role_for(role: Role) -> CourseRole:
    """The part an account of this role takes in the assignments it is enrolled in by default."""
    return CourseRole.staff if role is Role.instructor else CourseRole.student


def roles_of(session: Session, user_id: int) -> dict[int, CourseRole]:
    """assignment id -> the user's role there, for every assignment they are enrolled in."""
    rows = session.execute(select(Enrollment.assignment_id, Enrollment.role).where(Enrollment.user_id == user_id))
    return {assignment_id: role for assignment_id, role in rows}


def role_in(session: Session, user_id: int, assignment_id: int) -> CourseRole | None:
    return session.scalar(select(Enrollment.role).where(Enrollment.user_id == user_id,
                                                        Enrollment.assignment_id == assignment_id))


def enroll(session: Session, user: User, assignment: Assignment, role: CourseRole) -> bool:
    """Make `user` a `role` of `assignment`; True when that changed anything."""
    row = session.scalar(select(Enrollment).where(Enrollment.user_id == user.id,
                                                  Enrollment.assignment_id == assignment.id))
    if row is not None and row.role is role:
        return False
    if row is None:
        session.add(Enrollment(user_id=user.id, assignment_id=assignment.id, role=role))
    else:
        row.role = role
    session.flush()
    return True


def unenroll(session: Session, user: User, assignment: Assignment) -> bool:
    """Take `user` out of `assignment` (their submissions stay); True when they were in it."""
    row = session.scalar(select(Enrollment).where(Enrollment.user_id == user.id,
                                                  Enrollment.assignment_id == assignment.id))
    if row is None:
        return False
    session.delete(row)
    session.flush()
    return True


def enroll_in_all(session: Session, user: User, assignments: Iterable[Assignment]) -> None:
    """Enroll `user` in each of `assignments` in the part their account role gives."""
    for assignment in assignments:
        enroll(session, user, assignment, course_role_for(user.role))


def assignments_of(session: Session, user_id: int, role: CourseRole | None = None) -> list[Assignment]:
    """The assignments the user is enrolled in (only those where they are `role`), by slug."""
    query = select(Assignment).join(Enrollment, Enrollment.assignment_id == Assignment.id).where(
        Enrollment.user_id == user_id)
    if role is not None:
        query = query.where(Enrollment.role == role)
    return list(session.scalars(query.order_by(Assignment.slug)))


def members_of(session: Session, assignment: Assignment) -> list[tuple[User, CourseRole]]:
    """Everyone enrolled in `assignment` with their part: staff first, then by username."""
    rows = session.execute(select(User, Enrollment.role).join(Enrollment, Enrollment.user_id == User.id)
                           .where(Enrollment.assignment_id == assignment.id))
    return sorted(((user, role) for user, role in rows), key=lambda m: (m[1] is not CourseRole.staff, m[0].username))
