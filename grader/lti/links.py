"""The LMS course (context) and link a launch comes from, kept with the service addresses the
launch gives (roster, line items), and what they open here: the context a kernelgrade course,
the link one of its assignments."""
from __future__ import annotations

import re

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from grader.course.courses import add_assignment, create_course, find_course
from grader.lti import claims as c
from grader.lti.launch import Launch
from grader.models import Assignment, Course, LtiContext, LtiResourceLink, User

_SLUG_UNSAFE = re.compile(r"[^a-z0-9._-]+")


class NoContext(Exception):
    """A launch from outside any LMS course (no context claim): kernelgrade works per course."""


def context_of(db: Session, launch: Launch) -> LtiContext:
    """The launch's LMS course, made at its first launch, its title and service addresses renewed."""
    claim = launch.claim(c.CONTEXT)
    if not claim.get("id"):
        raise NoContext("This link was launched outside an LMS course: add it to a course's modules or assignments.")
    row = db.scalar(select(LtiContext).where(LtiContext.platform_id == launch.platform.id,
                                             LtiContext.context_id == str(claim["id"])))
    if row is None:
        row = LtiContext(platform_id=launch.platform.id, context_id=str(claim["id"]))
        db.add(row)
    row.deployment_id = launch.deployment_id
    row.title = str(claim.get("title") or claim.get("label") or row.title or claim["id"])[:256]
    row.memberships_url = launch.claim(c.NRPS).get("context_memberships_url") or row.memberships_url
    row.lineitems_url = launch.claim(c.AGS_ENDPOINT).get("lineitems") or row.lineitems_url
    db.flush()
    return row


def link_of(db: Session, launch: Launch, context: LtiContext) -> LtiResourceLink | None:
    """The launch's resource link (None for a deep-linking launch, which has none yet)."""
    claim = launch.claim(c.RESOURCE_LINK)
    if not claim.get("id"):
        return None
    row = db.scalar(select(LtiResourceLink).where(LtiResourceLink.context_id == context.id,
                                                  LtiResourceLink.resource_link_id == str(claim["id"])))
    if row is None:
        row = LtiResourceLink(context_id=context.id, resource_link_id=str(claim["id"]))
        db.add(row)
        custom = launch.claim(c.CUSTOM).get("kernelgrade_assignment")  # set by our deep-linking response
        if custom and context.course_id is not None:
            row.assignment = db.scalar(select(Assignment).where(Assignment.slug == str(custom),
                                                                Assignment.course_id == context.course_id))
    row.title = str(claim.get("title") or row.title or "")[:256] or None
    row.lineitem_url = launch.claim(c.AGS_ENDPOINT).get("lineitem") or row.lineitem_url
    db.flush()
    return row


def _course_slug(db: Session, context: LtiContext) -> str:
    base = _SLUG_UNSAFE.sub("-", (context.title or context.context_id).casefold()).strip("-.")[:56] or "course"
    slug, n = base, 1
    while find_course(db, slug) is not None:
        n += 1
        slug = f"{base}-{n}"
    return slug


def choosable_assignments(db: Session, context: LtiContext) -> list[Assignment]:
    """What a link of this LMS course may open: the linked course's assignments, and the
    assignments no course holds yet (choosing one puts it in the course)."""
    free = Assignment.course_id.is_(None)
    where = free if context.course_id is None else or_(free, Assignment.course_id == context.course_id)
    return list(db.scalars(select(Assignment).where(where).order_by(Assignment.slug)))


def open_assignment(db: Session, context: LtiContext, slug: str, instructor: User) -> Assignment:
    """The assignment `slug` for a link of this LMS course: its kernelgrade course made (its
    instructor `instructor`, its title the LMS course's) when the context has none, and the
    assignment put in it when no course holds it yet. ValueError when it is not choosable."""
    chosen = next((a for a in choosable_assignments(db, context) if a.slug == slug), None)
    if chosen is None:
        raise ValueError(f"{slug} is not an assignment this LMS course can link to.")
    course = db.get(Course, context.course_id) if context.course_id is not None else None
    if course is None:
        course = create_course(db, _course_slug(db, context), context.title or context.context_id, instructor)
        context.course_id = course.id
        db.flush()
    return add_assignment(db, course, chosen.slug)
