"""Submission bookkeeping shared by the web form, the REST API and the CLI."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from grader.models import Assignment, GpuCalibration, Run, Submission, User, login_key, utcnow
from grader.storage.blobstore import StoredBlob
from worker.rubric import load_rubric


class NotFound(LookupError):
    pass


MAX_IDEMPOTENCY_KEY = 128


class IdempotencyConflict(ValueError):
    """An Idempotency-Key the user already used for another upload (other bytes or assignment)."""

    def __init__(self, submission_id: int) -> None:
        super().__init__(
            f"this Idempotency-Key was already used for submission {submission_id}, which has different "
            "bytes or another assignment; send a new key for a new upload")
        self.submission_id = submission_id


class CommitUncertain(RuntimeError):
    """The commit of an upload's rows failed: they may or may not be stored (the database can
    fail after it committed and before it answered)."""


@dataclass(frozen=True)
class Recorded:
    """Where an upload stands once recorded: a new submission, or an earlier one it repeats."""

    submission: Submission
    run: Run
    earlier: bool  # True: the same upload was stored before; nothing new was created


def earlier_upload(session: Session, user: User, assignment: Assignment, sha256: str, key: str | None,
                   window_s: float, now: datetime) -> Submission | None:
    """The submission this upload repeats: the one stored under the same Idempotency-Key, else
    the newest one of the same bytes by the same user to the same assignment within `window_s`.
    Raises IdempotencyConflict when the key was used for another upload."""
    if key is not None:
        keyed = session.scalar(select(Submission).where(Submission.user_id == user.id,
                                                        Submission.idempotency_key == key))
        if keyed is not None:
            if keyed.sha256 != sha256 or keyed.assignment_id != assignment.id:
                raise IdempotencyConflict(keyed.id)
            return keyed
    if window_s <= 0:
        return None
    return session.scalar(
        select(Submission)
        .where(Submission.user_id == user.id, Submission.assignment_id == assignment.id,
               Submission.sha256 == sha256, Submission.uploaded_at >= now - timedelta(seconds=window_s))
        .order_by(Submission.id.desc())
        .limit(1))


def lock_user(session: Session, user: User) -> None:
    """Serialise one user's uploads until the transaction ends, so two copies of the same
    upload sent at once cannot both miss each other. PostgreSQL: a row lock on the user.
    SQLite has no row locks, and its reads take no lock at all: a write that changes nothing
    takes the database's write lock first (other writers wait for the commit, up to the
    connection's timeout), so the look for an earlier upload that follows sees theirs."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(update(User).where(User.id == user.id).values(id=User.id))
    else:
        session.execute(select(User.id).where(User.id == user.id).with_for_update())


def upload_run(submission: Submission) -> Run:
    """The run an upload created (its first); re-grades come after it."""
    return submission.runs[0]


def commit_upload(session: Session) -> None:
    """Commit the upload's rows; a failure is CommitUncertain, never "nothing was stored"."""
    try:
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        raise CommitUncertain(str(exc)) from exc


def sync_assignments(session: Session, slugs: list[str], search: Sequence[Path]) -> list[Assignment]:
    """Create or update one Assignment row per rubric file (found along `search`, the settings'
    rubric_dirs, after rubrics/)."""
    rows = []
    for slug in slugs:
        rubric = load_rubric(slug, search=search)
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
    """The account whose login is `username`, case-insensitively (users.login_key); an exact
    match first, so that accounts migration 0018 left apart (logins differing by case alone, no
    key) keep their own logins."""
    exact = session.scalar(select(User).where(User.username == username))
    return exact or session.scalar(select(User).where(User.login_key == login_key(username)))


def record_submission(
    session: Session, user: User, assignment: Assignment, filename: str, blob: StoredBlob,
    idempotency_key: str | None = None,
) -> tuple[Submission, Run]:
    """The submission and its first run; the caller commits before anything is sent."""
    submission = Submission(
        user=user,
        assignment=assignment,
        original_filename=filename[:512],
        size_bytes=blob.size,
        sha256=blob.sha256,
        idempotency_key=idempotency_key,
    )
    run = Run(submission=submission, reason="upload")
    session.add_all([submission, run])
    session.flush()
    return submission, run


def record_upload(session: Session, user: User, assignment: Assignment, filename: str, blob: StoredBlob,
                  key: str | None, window_s: float, check_admission: Callable[[], None]) -> Recorded:
    """Record an upload, or find the earlier one it repeats (which passed admission when it was
    new, so a repeat is answered even past the deadline or quota). `check_admission` raises to
    refuse a new one. The caller commits with `commit_upload`."""
    lock_user(session, user)
    earlier = earlier_upload(session, user, assignment, blob.sha256, key, window_s, utcnow())
    if earlier is not None:
        return Recorded(earlier, upload_run(earlier), earlier=True)
    check_admission()
    submission, run = record_submission(session, user, assignment, filename, blob, key)
    return Recorded(submission, run, earlier=False)


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
