"""Submission bookkeeping shared by the web form, the REST API and the CLI."""
from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.blobstore import StoredBlob
from grader.membership import enroll_in_all
from grader.models import Assignment, GpuCalibration, Role, Run, Submission, User, utcnow
from worker.rubric import load_rubric


class NotFound(LookupError):
    pass


def sync_assignments(session: Session, slugs: list[str]) -> list[Assignment]:
    """Create or update one Assignment row per rubric file."""
    rows = []
    for slug in slugs:
        rubric = load_rubric(slug)
        row = session.scalar(select(Assignment).where(Assignment.slug == slug))
        if row is None:
            row = Assignment(slug=slug, title=rubric.title, total_points=rubric.total_points)
            session.add(row)
        else:
            row.title, row.total_points = rubric.title, rubric.total_points
        rows.append(row)
    session.flush()
    return rows


def get_assignment(session: Session, slug: str) -> Assignment:
    row = session.scalar(select(Assignment).where(Assignment.slug == slug))
    if row is None:
        raise NotFound(f"no assignment {slug!r}")
    return row


def find_user(session: Session, username: str) -> User | None:
    return session.scalar(select(User).where(User.username == username))


def get_or_create_user(session: Session, username: str, role: Role,
                       assignments: Sequence[Assignment] | None = None) -> User:
    """The user named `username` (an existing one keeps its role), enrolled in `assignments`
    in the part its role gives (grader.membership). None: a new user joins every assignment
    there is (the one-course default), an existing one changes nothing."""
    user = find_user(session, username)
    if user is None:
        user = User(username=username, role=role)
        session.add(user)
        session.flush()
        if assignments is None:
            assignments = session.scalars(select(Assignment)).all()
    enroll_in_all(session, user, assignments or ())
    return user


def record_submission(
    session: Session, user: User, assignment: Assignment, filename: str, blob: StoredBlob
) -> tuple[Submission, Run]:
    """The submission and its first run; the caller commits before anything is sent."""
    submission = Submission(
        user=user,
        assignment=assignment,
        original_filename=filename[:512],
        size_bytes=blob.size,
        sha256=blob.sha256,
    )
    run = Run(submission=submission, reason="upload")
    session.add_all([submission, run])
    session.flush()
    return submission, run


def record_regrade(session: Session, submission: Submission) -> Run:
    run = Run(submission=submission, reason="regrade")
    session.add(run)
    session.flush()
    return run


def save_calibration(
    session: Session, slug: str, gpu_name: str, targets: dict[str, float], margin: float, details: dict
) -> GpuCalibration:
    """Store (or replace) the targets for one GPU model."""
    assignment = get_assignment(session, slug)
    row = session.scalar(
        select(GpuCalibration).where(GpuCalibration.assignment_id == assignment.id, GpuCalibration.gpu_name == gpu_name)
    )
    if row is None:
        row = GpuCalibration(assignment_id=assignment.id, gpu_name=gpu_name, targets={}, margin=margin)
        session.add(row)
    row.targets, row.margin, row.details, row.measured_at = dict(targets), margin, details, utcnow()
    session.flush()
    return row


def calibrated_targets_for(session: Session, slug: str, gpu_name: str | None) -> dict[str, float] | None:
    """The stored targets for this GPU model, or None (the rubric's targets apply)."""
    if not gpu_name:
        return None
    row = session.scalar(
        select(GpuCalibration)
        .join(Assignment, GpuCalibration.assignment_id == Assignment.id)
        .where(Assignment.slug == slug, GpuCalibration.gpu_name == gpu_name)
    )
    return {k: float(v) for k, v in row.targets.items()} if row else None
