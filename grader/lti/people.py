"""Who a launch or a roster member is, and their part in the linked course.

The person is found through their LMS identity only (grader.auth.identities: the platform's
issuer and their `sub`, which is the roster's `user_id`). The first time, the identity is tied to
the account the linked course's own roster gave the same SIS user id (the launch's
lis.person_sourcedid, the roster's lis_person_sourcedid): an id the university issued, never a
name or an e-mail address. Failing that, a new account is made for them, with no password
(they come in through the LMS, or single sign-on) and a login of the platform and the LMS's
user id. The course role follows the LMS's role at every launch and roster sync."""
from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.auth.audit import Via
from grader.auth.identities import Identity, account_of, made_for, tie
from grader.course.membership import enroll
from grader.lti import claims as c
from grader.lti.launch import Launch
from grader.models import Course, CourseRole, Enrollment, LtiPlatform, Role, User, login_key

_UNSAFE = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True)
class Member:
    """A person as the LMS gives them: in a launch's claims or a roster (NRPS) entry."""

    subject: str
    name: str | None
    email: str | None
    sis_id: str | None
    roles: tuple[str, ...]

    @classmethod
    def of_launch(cls, launch: Launch) -> Member:
        sis = launch.claim(c.LIS).get("person_sourcedid")
        return cls(launch.subject, launch.name, launch.email, str(sis) if sis else None, tuple(launch.roles))

    @classmethod
    def of_roster(cls, entry: dict[str, object]) -> Member:
        given = " ".join(str(entry.get(k) or "") for k in ("given_name", "family_name")).strip()
        roles = entry.get("roles")
        sis = entry.get("lis_person_sourcedid")
        return cls(str(entry["user_id"]), str(entry.get("name") or "") or given or None,
                   str(entry["email"]) if entry.get("email") else None, str(sis) if sis else None,
                   tuple(str(r) for r in roles) if isinstance(roles, list) else ())


def _roster_match(db: Session, member: Member, course: Course | None) -> User | None:
    if course is None or member.sis_id is None:
        return None
    return db.scalar(select(User).join(Enrollment, Enrollment.user_id == User.id)
                     .where(Enrollment.course_id == course.id, Enrollment.sis_user_id == member.sis_id))


def _new_login(db: Session, platform: LtiPlatform, member: Member) -> str:
    base = _UNSAFE.sub("-", f"{platform.name}-{member.subject}".casefold()).strip("-")[:100] or "lti"
    login, n = base, 1
    while db.scalar(select(User.id).where(User.login_key == login_key(login))) is not None:
        n += 1
        login = f"{base}-{n}"
    return login


def person_of(db: Session, platform: LtiPlatform, member: Member, course: Course | None, role: CourseRole) -> User:
    """The member's account (made when new); IdentityRefused when their identity is another's."""
    identity = Identity(platform.issuer, member.subject, "lti")
    user = account_of(db, identity)
    if user is not None:
        return user
    user = _roster_match(db, member, course)
    if user is not None:
        tie(db, identity, user, Via.lti)
        return user
    return made_for(db, identity, lambda: User(
        username=_new_login(db, platform, member), full_name=member.name, email=member.email,
        role=Role.instructor if role is CourseRole.instructor else Role.student), Via.lti)


def take_part(db: Session, member: Member, user: User, course: Course, role: CourseRole) -> None:
    """Enroll `user` in `course` as the LMS says (the LMS's test student: never), with what it
    says of them on the enrollment; a member the roster had dropped is listed again."""
    if c.is_test_user(list(member.roles)):
        return
    enroll(db, user, course, role)
    entry = db.scalar(select(Enrollment).where(Enrollment.user_id == user.id, Enrollment.course_id == course.id))
    assert entry is not None
    entry.full_name = member.name or entry.full_name
    entry.email = member.email or entry.email
    entry.sis_user_id = member.sis_id or entry.sis_user_id
    entry.dropped_at = None
