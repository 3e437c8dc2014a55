"""Submission bookkeeping shared by the web form, the REST API and the CLI."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.blobstore import StoredBlob
from grader.models import Assignment, Role, Run, Submission, User
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


def get_or_create_user(session: Session, username: str, role: Role) -> User:
    user = session.scalar(select(User).where(User.username == username))
    if user is None:
        user = User(username=username, role=role)
        session.add(user)
        session.flush()
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
