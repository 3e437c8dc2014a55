"""The grades that count, sent to the LMS gradebook of each link (Assignment and Grade Services).

For one link: every student of the assignment's gradebook (grader.reads.gradebook_reads: the
run the policy or staff chose, the late penalty and the staff's adjustments and manual grades)
who is enrolled as a student, not dropped by the LMS's roster, and known to this LMS (a launch
or the roster tied their identity) gets their final grade posted to the link's line item (made
when the link has none), with the counted upload's time as the LMS's submission time. A grade
already sent is not sent again unless asked. Each student's result is kept (lti_grade_sends:
sent, skipped and why, failed and the LMS's answer) and one failure never stops the others.

When grades change (`links_with_new_grades`: a run finished, a staff entry, a choice of run or an
extension after the link's grades were last read), the reconciler queues the link's send
(grader.lti.tasks); staff may also send at once from the course's LMS page.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.lti.services import ServiceError, Services
from grader.models import (
    Assignment,
    CountedRun,
    CourseRole,
    Enrollment,
    Extension,
    ExternalIdentity,
    GradeAdjustment,
    LtiContext,
    LtiGradeSend,
    LtiPlatform,
    LtiResourceLink,
    Run,
    Submission,
    utcnow,
)
from grader.reads.gradebook_reads import GradebookRow, gradebook
from grader.settings import Settings


@dataclass(frozen=True)
class Sent:
    username: str
    status: str  # sent | skipped | failed | unchanged
    points: float | None
    detail: str = ""


def _record(db: Session, link: LtiResourceLink, user_id: int, status: str, points: float | None, detail: str) -> None:
    row = db.scalar(select(LtiGradeSend).where(LtiGradeSend.link_id == link.id, LtiGradeSend.user_id == user_id))
    if row is None:
        row = LtiGradeSend(link_id=link.id, user_id=user_id, attempts=0)
        db.add(row)
    row.status, row.points, row.detail, row.updated_at = status, points, detail[:512], utcnow()
    row.attempts = (row.attempts or 0) + 1


def _students(db: Session, course_id: int) -> dict[int, Enrollment]:
    return {e.user_id: e for e in db.scalars(select(Enrollment).where(Enrollment.course_id == course_id,
                                                                      Enrollment.role == CourseRole.student))}


def _subjects(db: Session, issuer: str, user_ids: Iterable[int]) -> dict[int, str]:
    return dict(db.execute(select(ExternalIdentity.user_id, ExternalIdentity.subject)
                           .where(ExternalIdentity.issuer == issuer, ExternalIdentity.user_id.in_(list(user_ids)))).all())


def _submitted_at(db: Session, row: GradebookRow) -> datetime | None:
    upload = db.get(Submission, row.graded.submission_id) if row.graded is not None else None
    return upload.uploaded_at if upload is not None else None


def send_link_grades(db: Session, settings: Settings, link: LtiResourceLink, resend: bool = False) -> list[Sent]:
    """Send what has changed (everything with `resend`) for one link; each student's result."""
    context = db.get(LtiContext, link.context_id)
    assignment = db.get(Assignment, link.assignment_id) if link.assignment_id is not None else None
    if context is None or assignment is None or context.course_id is None:
        return []
    platform = db.get(LtiPlatform, context.platform_id)
    assert platform is not None
    services = Services(settings, platform)
    if link.lineitem_url is None:
        if context.lineitems_url is None:
            raise ServiceError(f"{platform.name} gave this link no gradebook column and no way to make one "
                               "(its launches carry no Assignment and Grade Services claim)")
        link.lineitem_url = services.find_or_make_lineitem(context.lineitems_url, link.resource_link_id,
                                                           assignment.slug, assignment.title, assignment.total_points)
    students = _students(db, context.course_id)
    book = gradebook(db, assignment, tz=settings.course_zone, search=settings.rubric_dirs)
    subjects = _subjects(db, platform.issuer, (r.user_id for r in book.rows))
    previous = {s.user_id: s for s in db.scalars(select(LtiGradeSend).where(LtiGradeSend.link_id == link.id))}
    results = []
    for row in book.rows:
        entry, points = students.get(row.user_id), row.total
        why = ("not a student of the course" if entry is None else "dropped by the LMS's roster" if entry.dropped_at
               else f"never launched from {platform.name}" if row.user_id not in subjects
               else "no grade yet" if points is None else "")
        if why:
            results.append(Sent(row.username, "skipped", points, why))
            _record(db, link, row.user_id, "skipped", points, why)
            continue
        before = previous.get(row.user_id)
        if not resend and before is not None and before.status == "sent" and before.points == points:
            results.append(Sent(row.username, "unchanged", points))
            continue
        assert points is not None
        try:
            services.post_score(link.lineitem_url, subjects[row.user_id], points, assignment.total_points,
                                _submitted_at(db, row))
        except (ServiceError, httpx.HTTPError) as exc:
            results.append(Sent(row.username, "failed", points, str(exc)))
            _record(db, link, row.user_id, "failed", points, str(exc))
            continue
        results.append(Sent(row.username, "sent", points))
        _record(db, link, row.user_id, "sent", points, "")
    return results


def links_of(db: Session, assignment_id: int) -> list[LtiResourceLink]:
    return list(db.scalars(select(LtiResourceLink).where(LtiResourceLink.assignment_id == assignment_id)))


def newest_grade_event(db: Session, assignment_id: int) -> datetime | None:
    """When the assignment's grades last changed: the newest run to finish, staff entry, choice
    of the run that counts or extension."""
    stamps = (
        select(func.max(Run.finished_at)).join(Submission, Submission.id == Run.submission_id)
        .where(Submission.assignment_id == assignment_id),
        select(func.max(GradeAdjustment.created_at)).where(GradeAdjustment.assignment_id == assignment_id),
        select(func.max(CountedRun.created_at)).where(CountedRun.assignment_id == assignment_id),
        select(func.max(Extension.granted_at)).where(Extension.assignment_id == assignment_id),
    )
    found = [value for value in (db.scalar(stamp) for stamp in stamps) if value is not None]
    return max(found) if found else None


def links_with_new_grades(db: Session) -> list[LtiResourceLink]:
    """Links whose assignment's grades changed since they were last read for sending."""
    links = db.scalars(select(LtiResourceLink).where(LtiResourceLink.assignment_id.is_not(None))
                       .order_by(LtiResourceLink.id)).all()
    newest: dict[int, datetime | None] = {}
    changed = []
    for link in links:
        assert link.assignment_id is not None
        if link.assignment_id not in newest:
            newest[link.assignment_id] = newest_grade_event(db, link.assignment_id)
        stamp = newest[link.assignment_id]
        if stamp is not None and (link.grades_checked_at is None or stamp > link.grades_checked_at):
            changed.append(link)
    return changed
