"""The code of each student's latest submission of an assignment, read from the blob store
(for the similarity check). Zips are unpacked with the grading pipeline's checks and limits;
a submission that is not a valid archive is left out and named."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.models import Assignment, Enrollment, Submission, User
from grader.roles import STAFF
from grader.similarity.compare import Sources, tree_sources
from grader.storage.blobstore import BlobStore
from worker.rubric import Rubric
from worker.unpack import BadArchive, UnpackLimits, find_assignment_root, unpack_zip


@dataclass
class ClassSources:
    students: dict[str, Sources] = field(default_factory=dict)  # username -> files
    skipped: dict[str, str] = field(default_factory=dict)  # username -> why
    submissions: dict[str, str] = field(default_factory=dict)  # username -> sha256 of the zip read


def latest_submissions(session: Session, slug: str) -> list[tuple[str, str]]:
    """(username, sha256) of the newest submission of `slug` by each submitter who is not
    staff of it (staff upload the reference kit to test: not a student's work), by username."""
    newest = (select(Submission.user_id, func.max(Submission.id).label("id"))
              .join(Assignment, Submission.assignment_id == Assignment.id)
              .where(Assignment.slug == slug).group_by(Submission.user_id).subquery())
    staff = (select(Enrollment.user_id).join(Assignment, Enrollment.course_id == Assignment.course_id)
             .where(Assignment.slug == slug, Enrollment.role.in_(STAFF)))
    rows = session.execute(
        select(User.username, Submission.sha256).join(newest, Submission.id == newest.c.id)
        .join(User, Submission.user_id == User.id).where(User.id.not_in(staff)).order_by(User.username)
    )
    return [(name, sha) for name, sha in rows]


def upload_history(session: Session, slug: str, username: str) -> list[tuple[str, datetime]]:
    """(sha256, uploaded_at) of every submission of `slug` by `username`, oldest first."""
    rows = session.execute(
        select(Submission.sha256, Submission.uploaded_at).join(Assignment, Submission.assignment_id == Assignment.id)
        .join(User, Submission.user_id == User.id).where(Assignment.slug == slug, User.username == username)
        .order_by(Submission.uploaded_at, Submission.id))
    return [(sha, at) for sha, at in rows]


def blob_sources(blobs: BlobStore, sha256: str, rubric: Rubric, limits: UnpackLimits, work: Path) -> Sources:
    """The rubric's student files in the zip stored under `sha256`, unpacked under `work`;
    BadArchive or FileNotFoundError when it is not a valid submission."""
    dest = work / sha256
    unpack_zip(blobs.path(sha256), dest, limits)
    return tree_sources(find_assignment_root(dest, rubric.required_files), rubric.student_files)


def class_sources(session: Session, blobs: BlobStore, rubric: Rubric, limits: UnpackLimits) -> ClassSources:
    found = ClassSources()
    with tempfile.TemporaryDirectory(prefix="kg-similarity-") as tmp:
        for username, sha256 in latest_submissions(session, rubric.slug):
            try:
                found.students[username] = blob_sources(blobs, sha256, rubric, limits, Path(tmp) / username)
            except (BadArchive, FileNotFoundError) as exc:
                found.skipped[username] = str(exc)
            else:
                found.submissions[username] = sha256
    return found
