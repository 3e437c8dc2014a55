"""Database adapters of the course policies: the rows behind grader.course.deadlines and grader.course.quotas.

The pure modules decide; this one only reads and writes what they need: an assignment's
schedule, a student's extension, and the runs a quota counts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from grader.course.deadlines import Extension, Lateness, LatePolicy, LateStatus, evaluate
from grader.course.membership import role_in
from grader.course.quotas import QuotaDecision, QuotaPolicy, check
from grader.course.storage import StorageUse
from grader.models import Assignment, Course, ErrorClass, Role, Run, Submission, User
from grader.models import Extension as ExtensionRow
from grader.service import get_assignment
from grader.settings import Settings

SCORE_POLICIES = ("latest", "best")


def late_policy(assignment: Assignment) -> LatePolicy:
    return LatePolicy(
        release_at=assignment.release_at,
        due_at=assignment.due_at,
        grace=timedelta(seconds=assignment.grace_s),
        late_window=timedelta(seconds=assignment.late_window_s),
        penalty_per_day=assignment.late_penalty_per_day,
    )


def set_schedule(session: Session, slug: str, policy: LatePolicy, score_policy: str) -> Assignment:
    """Store `policy` (already validated by LatePolicy) and the gradebook's score policy."""
    if score_policy not in SCORE_POLICIES:
        raise ValueError(f"score policy must be one of {SCORE_POLICIES}")
    row = get_assignment(session, slug)
    row.release_at, row.due_at = policy.release_at, policy.due_at
    row.grace_s = int(policy.grace.total_seconds())
    row.late_window_s = int(policy.late_window.total_seconds())
    row.late_penalty_per_day = policy.penalty_per_day
    row.score_policy = score_policy
    session.flush()
    return row


def extension_for(session: Session, assignment_id: int, user_id: int) -> Extension | None:
    row = session.scalar(select(ExtensionRow).where(ExtensionRow.assignment_id == assignment_id,
                                                    ExtensionRow.user_id == user_id))
    return _extension(row) if row is not None else None


def _extension(row: ExtensionRow) -> Extension:
    return Extension(timedelta(seconds=row.extra_s), row.reason or "")


def grant_extension(session: Session, slug: str, user: User, extension: Extension) -> ExtensionRow:
    """Give `user` this extension on `slug`, replacing an earlier one (zero removes its effect)."""
    assignment = get_assignment(session, slug)
    row = session.scalar(select(ExtensionRow).where(ExtensionRow.assignment_id == assignment.id,
                                                    ExtensionRow.user_id == user.id))
    if row is None:
        row = ExtensionRow(assignment_id=assignment.id, user_id=user.id, extra_s=0)
        session.add(row)
    row.extra_s, row.reason = int(extension.extra.total_seconds()), extension.reason or None
    session.flush()
    return row


def lateness(session: Session, assignment: Assignment, user_id: int, at: datetime, settings: Settings) -> Lateness:
    """Where an upload by `user_id` at `at` falls in the assignment's schedule."""
    return evaluate(late_policy(assignment), at, extension_for(session, assignment.id, user_id),
                    ZoneInfo(settings.course_timezone))


def run_limit(settings: Settings, assignment: Assignment) -> tuple[int, str]:
    """The graded runs each student may start in `assignment` per quota window (0: no quota),
    and whose number that is: the assignment's own, else its course's, else the service's."""
    if assignment.quota_runs is not None:
        return assignment.quota_runs, "this assignment's own"
    return course_run_limit(settings, assignment.course)


def course_run_limit(settings: Settings, course: Course | None) -> tuple[int, str]:
    """The run quota of the course's assignments that set none: the course's, else the service's."""
    if course is not None and course.quota_runs is not None:
        return course.quota_runs, f"course {course.slug}'s"
    return settings.quota_runs, "the service's default"


def quota_policy(settings: Settings, assignment: Assignment) -> QuotaPolicy:
    return QuotaPolicy(run_limit(settings, assignment)[0], timedelta(seconds=settings.quota_window_s))


def counted_run_times(session: Session, user_id: int, assignment_id: int, since: datetime) -> list[datetime]:
    """Creation times of the student's runs in the assignment a quota counts: every run of their
    own uploads created after `since`, except those that failed as infra_error (never their
    fault); staff re-grades (reason `regrade`) do not count."""
    query = (select(Run.created_at).join(Submission, Run.submission_id == Submission.id)
             .where(Submission.user_id == user_id, Submission.assignment_id == assignment_id,
                    Run.reason == "upload", Run.created_at > since,
                    or_(Run.error_class.is_(None), Run.error_class != ErrorClass.infra_error)))
    return list(session.scalars(query))


def quota_decision(session: Session, settings: Settings, user: User, assignment: Assignment,
                   now: datetime) -> QuotaDecision:
    policy = quota_policy(settings, assignment)
    times = counted_run_times(session, user.id, assignment.id, now - policy.window) if policy.limit else []
    return check(policy, times, now, exempt=user.role is not Role.student)


@dataclass(frozen=True)
class Refusal:
    """Why an upload is not taken: the HTTP status, a message for the student, and when
    trying again would work (seconds), where that is known."""

    status_code: int
    code: str
    message: str
    retry_after_s: int | None = None


def storage_use(session: Session, settings: Settings, user_id: int, assignment: Assignment) -> StorageUse:
    """What the student keeps in the assignment (each distinct upload once: grader.course.storage)
    against the assignment's limit, or the service's."""
    distinct = (select(func.max(Submission.size_bytes).label("size"))
                .where(Submission.user_id == user_id, Submission.assignment_id == assignment.id)
                .group_by(Submission.sha256).subquery())
    used = session.scalar(select(func.coalesce(func.sum(distinct.c.size), 0))) or 0
    limit = assignment.storage_quota_bytes
    return StorageUse(int(used), settings.storage_quota_bytes if limit is None else limit)


def storage_refusal(session: Session, settings: Settings, user: User, assignment: Assignment, sha256: str,
                    size: int) -> Refusal | None:
    """413 when a student's upload of `size` bytes (`sha256`) would pass what they may keep in the
    assignment; None for staff and for bytes the student keeps there already."""
    role = role_in(session, user.id, assignment.id)
    if role is None or role.is_staff:
        return None
    kept = session.scalar(select(Submission.id).where(Submission.user_id == user.id, Submission.sha256 == sha256,
                                                      Submission.assignment_id == assignment.id).limit(1))
    why = storage_use(session, settings, user.id, assignment).refusal(size, kept is not None)
    return Refusal(413, "storage_quota_exceeded", why) if why else None


def admission(session: Session, settings: Settings, user: User, assignment: Assignment, now: datetime) -> Refusal | None:
    """None when `user` may upload to `assignment` at `now`. Someone not enrolled in it is
    answered as if it did not exist; its staff may always upload (to test); a student may not
    upload before the release or after the late window closes, nor over the quota."""
    role = role_in(session, user.id, assignment.id)
    if role is None:
        return Refusal(404, "not_found", f"no assignment {assignment.slug!r}")
    if role.is_staff:
        return None
    late = lateness(session, assignment, user.id, now, settings)
    refused = late.refusal(assignment.slug)
    if refused is not None:
        return Refusal(403, "closed" if late.status is LateStatus.closed else "not_released", refused)
    quota = quota_decision(session, settings, user, assignment, now)
    if not quota.allowed:
        return Refusal(429, "quota_exceeded", quota.reason, quota.retry_after_s(now))
    return None


def late_checker(session: Session, assignment: Assignment) -> Callable[[int, datetime], Lateness]:
    """(user id, upload time) -> Lateness for every student of `assignment`, with the
    extensions read once (the gradebook asks for every scored run)."""
    policy = late_policy(assignment)
    extensions = {row.user_id: _extension(row)
                  for row in session.scalars(select(ExtensionRow).where(ExtensionRow.assignment_id == assignment.id))}
    return lambda user_id, at: evaluate(policy, at, extensions.get(user_id))
