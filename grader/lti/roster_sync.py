"""The LMS course's roster read in (Names and Role Provisioning), at an instructor's launch and
on demand: each active member with a role that gives access is found or made (grader.lti.people)
and enrolled as the LMS says, their name, e-mail and SIS id on the enrollment; the LMS's test
student is left out. A member of the kernelgrade course known to this LMS whom the roster no
longer lists as active is marked dropped (`enrollments.dropped_at`: their runs and grades stay,
no grade is sent for them); members the LMS never knew (added here by hand or by a CSV) are left
alone. A member whose identity is another account's is reported, not enrolled."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.auth.identities import IdentityRefused
from grader.lti import claims as c
from grader.lti.people import Member, person_of, take_part
from grader.lti.services import Services
from grader.models import Course, Enrollment, ExternalIdentity, LtiContext, LtiPlatform, User, utcnow
from grader.settings import Settings

INACTIVE = ("Inactive", "Deleted")
# An instructor's launch reads the roster again only when it was read longer ago than this (a
# class's instructors launch often; the LMS page's button reads it at once)
LAUNCH_READ_AFTER = timedelta(minutes=10)


@dataclass
class RosterSync:
    enrolled: list[str] = field(default_factory=list)  # logins added or whose role or data changed
    kept: int = 0  # listed and unchanged
    dropped: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why, one line each

    def summary(self) -> str:
        return (f"{len(self.enrolled)} enrolled or updated, {self.kept} unchanged, {len(self.dropped)} dropped, "
                f"{len(self.refused)} refused")


def roster_due(context: LtiContext, now: datetime) -> bool:
    """Whether an instructor's launch should queue the context's roster read."""
    return bool(context.memberships_url) and (context.roster_synced_at is None
                                              or now - context.roster_synced_at >= LAUNCH_READ_AFTER)


def sync_roster(db: Session, settings: Settings, context: LtiContext) -> RosterSync:
    """Read the context's roster into its linked course (nothing when it has no course or no
    roster address). ServiceError when the LMS refuses the roster."""
    report = RosterSync()
    course = db.get(Course, context.course_id) if context.course_id is not None else None
    platform = db.get(LtiPlatform, context.platform_id)
    if course is None or platform is None or not context.memberships_url:
        return report
    listed: set[int] = set()
    for entry in Services(settings, platform).members(context.memberships_url):
        member = Member.of_roster(entry)
        role = c.course_role(list(member.roles))
        if entry.get("status") in INACTIVE or role is None or c.is_test_user(list(member.roles)):
            continue
        try:
            user = person_of(db, platform, member, course, role)
        except IdentityRefused as exc:
            report.refused.append(f"{member.name or member.subject}: {exc}")
            continue
        before = db.scalar(select(Enrollment).where(Enrollment.user_id == user.id, Enrollment.course_id == course.id))
        was = None if before is None else (before.role, before.full_name, before.email, before.dropped_at)
        take_part(db, member, user, course, role)
        db.flush()
        now = db.scalar(select(Enrollment).where(Enrollment.user_id == user.id, Enrollment.course_id == course.id))
        assert now is not None
        if was == (now.role, now.full_name, now.email, now.dropped_at):
            report.kept += 1
        else:
            report.enrolled.append(user.username)
        listed.add(user.id)
    known = select(ExternalIdentity.user_id).where(ExternalIdentity.issuer == platform.issuer)
    for enrollment, login in db.execute(select(Enrollment, User.username).join(User, User.id == Enrollment.user_id)
                                   .where(Enrollment.course_id == course.id, Enrollment.dropped_at.is_(None),
                                          Enrollment.user_id.in_(known))).all():
        if enrollment.user_id not in listed:
            enrollment.dropped_at = utcnow()
            report.dropped.append(login)
    context.roster_synced_at = utcnow()
    return report
