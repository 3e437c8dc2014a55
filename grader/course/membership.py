"""Who belongs to which course, and as what (the `enrollments` table): one roster and one staff
list per course, read for every assignment the course holds.

A student of a course submits to its assignments and reads their own submissions there; its
staff (instructors and TAs) read everyone's work in it, and what else each may do is the role's
powers (grader.roles). Nobody sees an assignment of a course they are not in, nor one in
no course: to them it reads as absent. The account's own role (User.role) says whether it may
make courses and hold staff scopes on its tokens (grader.auth.credentials), and which part a
new account takes by default (`course_role_for`).
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import Assignment, Course, CourseRole, Enrollment, Role, User
from grader.roles import STAFF
from grader.service import find_user


def course_role_for(role: Role) -> CourseRole:
    """The part an account of this role takes in the courses it is enrolled in by default."""
    return CourseRole.instructor if role is Role.instructor else CourseRole.student


def roles_of(session: Session, user_id: int) -> dict[int, CourseRole]:
    """assignment id -> the user's role in its course, for every assignment of their courses."""
    rows = session.execute(select(Assignment.id, Enrollment.role)
                           .join(Enrollment, Enrollment.course_id == Assignment.course_id)
                           .where(Enrollment.user_id == user_id))
    return {assignment_id: role for assignment_id, role in rows}


def course_roles_of(session: Session, user_id: int) -> dict[int, CourseRole]:
    """course id -> the user's role there, for every course they are enrolled in."""
    rows = session.execute(select(Enrollment.course_id, Enrollment.role).where(Enrollment.user_id == user_id))
    return {course_id: role for course_id, role in rows}


def staff_anywhere(session: Session, user_id: int) -> bool:
    """Whether the user is an instructor or TA of some course."""
    return session.scalar(select(Enrollment.id).where(Enrollment.user_id == user_id,
                                                      Enrollment.role.in_(STAFF)).limit(1)) is not None


def role_in(session: Session, user_id: int, assignment_id: int) -> CourseRole | None:
    """The user's role in the course of the assignment; None when they are not in it."""
    return session.scalar(select(Enrollment.role).join(Assignment, Assignment.course_id == Enrollment.course_id)
                          .where(Enrollment.user_id == user_id, Assignment.id == assignment_id))


def role_in_course(session: Session, user_id: int, course_id: int) -> CourseRole | None:
    return session.scalar(select(Enrollment.role).where(Enrollment.user_id == user_id,
                                                        Enrollment.course_id == course_id))


def enroll(session: Session, user: User, course: Course, role: CourseRole) -> bool:
    """Make `user` a `role` of `course`; True when that changed anything."""
    row = session.scalar(select(Enrollment).where(Enrollment.user_id == user.id, Enrollment.course_id == course.id))
    if row is not None and row.role is role:
        return False
    if row is None:
        session.add(Enrollment(user_id=user.id, course_id=course.id, role=role))
    else:
        row.role = role
    session.flush()
    return True


def unenroll(session: Session, user: User, course: Course) -> bool:
    """Take `user` out of `course` (their submissions stay); True when they were in it."""
    row = session.scalar(select(Enrollment).where(Enrollment.user_id == user.id, Enrollment.course_id == course.id))
    if row is None:
        return False
    session.delete(row)
    session.flush()
    return True


def enroll_in_all(session: Session, user: User, courses: Iterable[Course]) -> None:
    """Enroll `user` in each of `courses` in the part their account role gives."""
    for course in courses:
        enroll(session, user, course, course_role_for(user.role))


def get_or_create_user(session: Session, username: str, role: Role,
                       courses: Sequence[Course] | None = None) -> User:
    """The user named `username` (an existing one keeps its role), enrolled in `courses` in
    the part its role gives (below). None: a new user joins every course there is, an existing
    one changes nothing; for scripts of a one-course service and the tests (`grader user add`
    always names its courses: with several, enrolling by omission made one course's staff
    another's)."""
    user = find_user(session, username)
    if user is None:
        user = User(username=username, role=role)
        session.add(user)
        session.flush()
        if courses is None:
            courses = session.scalars(select(Course)).all()
    enroll_in_all(session, user, courses or ())
    return user


def assignments_of(session: Session, user_id: int, roles: Collection[CourseRole] | None = None) -> list[Assignment]:
    """The assignments of the user's courses (only those where they are one of `roles`), by slug."""
    query = select(Assignment).join(Enrollment, Enrollment.course_id == Assignment.course_id).where(
        Enrollment.user_id == user_id)
    if roles is not None:
        query = query.where(Enrollment.role.in_(list(roles)))
    return list(session.scalars(query.order_by(Assignment.slug)))


def courses_of(session: Session, user_id: int) -> list[tuple[Course, CourseRole]]:
    """The user's courses with their role in each, by slug."""
    rows = session.execute(select(Course, Enrollment.role).join(Enrollment, Enrollment.course_id == Course.id)
                           .where(Enrollment.user_id == user_id).order_by(Course.slug))
    return [(course, role) for course, role in rows]


def members_of(session: Session, course: Course) -> list[tuple[User, CourseRole]]:
    """Everyone enrolled in `course` with their part: instructors, then TAs, then students, each by username."""
    rows = session.execute(select(User, Enrollment.role).join(Enrollment, Enrollment.user_id == User.id)
                           .where(Enrollment.course_id == course.id))
    order = list(CourseRole)
    return sorted(((user, role) for user, role in rows), key=lambda m: (order.index(m[1]), m[0].username))
