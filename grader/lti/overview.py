"""What a course's LMS page shows (grader/pages/lms.py): each LMS course linked to it with its
roster's last sync, each link with its assignment and gradebook column, and each student's last
grade send (sent, skipped and why, failed and the LMS's answer)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import Assignment, LtiContext, LtiGradeSend, LtiPlatform, LtiResourceLink, User


@dataclass(frozen=True)
class SendRow:
    login: str
    name: str | None
    status: str
    points: float | None
    detail: str
    attempts: int
    updated_at: datetime


@dataclass
class LinkView:
    id: int
    title: str
    assignment: str | None
    lineitem_url: str | None
    sends: list[SendRow] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(row.status == status for row in self.sends)


@dataclass
class ContextView:
    id: int
    lms: str
    title: str
    roster_synced_at: datetime | None
    has_roster: bool
    links: list[LinkView] = field(default_factory=list)


def course_lms(db: Session, course_id: int) -> list[ContextView]:
    views = []
    for context, platform in db.execute(select(LtiContext, LtiPlatform).join(LtiPlatform)
                                        .where(LtiContext.course_id == course_id).order_by(LtiContext.id)).all():
        view = ContextView(context.id, platform.name, context.title or context.context_id, context.roster_synced_at,
                           bool(context.memberships_url))
        for link, slug in db.execute(select(LtiResourceLink, Assignment.slug)
                                     .outerjoin(Assignment, Assignment.id == LtiResourceLink.assignment_id)
                                     .where(LtiResourceLink.context_id == context.id).order_by(LtiResourceLink.id)):
            sends = [SendRow(user.username, user.full_name, send.status, send.points, send.detail, send.attempts,
                             send.updated_at)
                     for send, user in db.execute(select(LtiGradeSend, User).join(User, User.id == LtiGradeSend.user_id)
                                                  .where(LtiGradeSend.link_id == link.id).order_by(User.username))]
            view.links.append(LinkView(link.id, link.title or link.resource_link_id, slug, link.lineitem_url, sends))
        views.append(view)
    return views
