"""Who a launch is, and their part in the linked course.

The person is found through their LMS identity only (grader.auth.identities: the platform's
issuer and their `sub`). A first launch ties the identity to the account the linked course's
own roster gave the same SIS user id (the launch's lis.person_sourcedid): an id the university
issued, never a name or an e-mail address. Failing that, a new account is made for them, with
no password (they come in through the LMS, or single sign-on) and a login of the platform and
the LMS's user id. The course role follows the LMS's role in the context at every launch."""
from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.auth.audit import Via
from grader.auth.identities import Identity, account_of, tie
from grader.course.membership import enroll
from grader.lti import claims as c
from grader.lti.launch import Launch
from grader.models import Course, CourseRole, Enrollment, Role, User, login_key

_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def identity_of(launch: Launch) -> Identity:
    return Identity(launch.platform.issuer, launch.subject, "lti")


def _sis_id(launch: Launch) -> str | None:
    value = launch.claim(c.LIS).get("person_sourcedid")
    return str(value) if value else None


def _roster_match(db: Session, launch: Launch, course: Course | None) -> User | None:
    sis = _sis_id(launch)
    if course is None or sis is None:
        return None
    return db.scalar(select(User).join(Enrollment, Enrollment.user_id == User.id)
                     .where(Enrollment.course_id == course.id, Enrollment.sis_user_id == sis))


def _new_login(db: Session, launch: Launch) -> str:
    base = _UNSAFE.sub("-", f"{launch.platform.name}-{launch.subject}".casefold()).strip("-")[:100] or "lti"
    login, n = base, 1
    while db.scalar(select(User.id).where(User.login_key == login_key(login))) is not None:
        n += 1
        login = f"{base}-{n}"
    return login


def person_of(db: Session, launch: Launch, course: Course | None, role: CourseRole) -> User:
    """The launch's account (made when new); IdentityRefused when its identity is another's."""
    identity = identity_of(launch)
    user = account_of(db, identity)
    if user is None:
        user = _roster_match(db, launch, course)
        if user is None:
            user = User(username=_new_login(db, launch), role=Role.instructor if role is CourseRole.instructor
                        else Role.student, full_name=launch.name, email=launch.email)
            db.add(user)
            db.flush()
        tie(db, identity, user, Via.lti)
    user.note_first_login()
    return user


def take_part(db: Session, launch: Launch, user: User, course: Course, role: CourseRole) -> None:
    """Enroll `user` in `course` as the LMS says (the LMS's test student: never), with what the
    launch says of them on the enrollment; a member the roster had dropped is listed again."""
    if c.is_test_user(launch.roles):
        return
    enroll(db, user, course, role)
    entry = db.scalar(select(Enrollment).where(Enrollment.user_id == user.id, Enrollment.course_id == course.id))
    assert entry is not None
    entry.full_name = launch.name or entry.full_name
    entry.email = launch.email or entry.email
    entry.sis_user_id = _sis_id(launch) or entry.sis_user_id
    entry.dropped_at = None
