"""Typed reads of submissions shared by the REST API, the web pages and the CLI: a page of
submissions the caller may see, the runs of one, one student's history in an assignment, and
the fair order of a bulk re-grade.

Each does a fixed, small number of SQL statements whatever the number of rows (listings
eager-load what they return)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import ColumnElement, and_, false, func, or_, select
from sqlalchemy.orm import Session, joinedload, selectinload

from grader.auth.credentials import SCOPE_READ, Principal
from grader.course.membership import role_in
from grader.models import Assignment, Run, Submission, User

T = TypeVar("T")
MAX_PAGE_SIZE = 100


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    page: int
    page_size: int

    @property
    def has_next(self) -> bool:
        return self.page * self.page_size < self.total


def _page_bounds(page: int, page_size: int) -> tuple[int, int]:
    if page < 1:
        raise ValueError("page starts at 1")
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
    return page, page_size


def list_submissions(
    session: Session,
    *,
    user_id: int | None = None,
    assignment_id: int | None = None,
    visible: ColumnElement[bool] | None = None,
    page: int = 1,
    page_size: int = 20,
) -> Page[Submission]:
    """Submissions newest first, of every user when `user_id` is None, limited to those the
    `visible` condition lets the caller see (`submission_visibility`).

    Each returned Submission has `user`, `assignment` and `runs` loaded (three statements in
    all, plus one for the total)."""
    page, page_size = _page_bounds(page, page_size)
    conditions = [] if visible is None else [visible]
    if user_id is not None:
        conditions.append(Submission.user_id == user_id)
    if assignment_id is not None:
        conditions.append(Submission.assignment_id == assignment_id)
    total = session.scalar(select(func.count()).select_from(Submission).where(*conditions)) or 0
    items = session.scalars(
        select(Submission)
        .where(*conditions)
        .options(joinedload(Submission.user), joinedload(Submission.assignment), selectinload(Submission.runs))
        .order_by(Submission.uploaded_at.desc(), Submission.id.desc())
        .offset((page - 1) * page_size)
        .limit(page_size)
    ).all()
    return Page(items=list(items), total=total, page=page, page_size=page_size)


def submission_visibility(principal: Principal) -> ColumnElement[bool]:
    """The submissions `principal` may read (Principal.can_read_submission, as SQL): every one
    of the assignments it reads all of, and its user's own in the assignments they are in."""
    taught = [aid for aid in principal.roles if principal.can_read_all_of(aid)]
    own = and_(Submission.user_id == principal.user.id, Submission.assignment_id.in_(list(principal.roles)))
    return or_(Submission.assignment_id.in_(taught), own if principal.can(SCOPE_READ) else false())


def submission_runs(session: Session, submission_id: int) -> list[Run]:
    """The runs of one submission, oldest first, with their problem results loaded."""
    return list(
        session.scalars(
            select(Run).where(Run.submission_id == submission_id).options(selectinload(Run.results)).order_by(Run.id)
        )
    )


def regrade_targets(session: Session, assignment: Assignment, which: str | list[int]) -> list[Submission]:
    """Submissions to re-grade, ordered fairly: round-robin over students (each student's
    first, then each one's second, ...), so one student with many uploads cannot hold the
    queue. `which`: "all" (every submission), "latest" (each student's newest), or a list of
    submission ids of this assignment (LookupError naming those that are not)."""
    query = select(Submission).where(Submission.assignment_id == assignment.id)
    if isinstance(which, list):
        query = query.where(Submission.id.in_(which))
    subs = session.scalars(
        query.order_by(Submission.user_id, Submission.uploaded_at.desc(), Submission.id.desc())
    ).all()
    if isinstance(which, list):
        missing = sorted(set(which) - {s.id for s in subs})
        if missing:
            raise LookupError(f"no submissions {missing} in assignment {assignment.slug!r}")
    per_user: dict[int, list[Submission]] = defaultdict(list)
    for sub in subs:
        per_user[sub.user_id].append(sub)
    if which == "latest":
        return [group[0] for group in per_user.values()]
    ordered: list[Submission] = []
    depth = max((len(g) for g in per_user.values()), default=0)
    for i in range(depth):
        ordered.extend(group[i] for group in per_user.values() if i < len(group))
    return ordered


def student_submissions(session: Session, assignment: Assignment, username: str) -> tuple[User, list[Submission]] | None:
    """The student `username` and their submissions in `assignment`, newest first, runs loaded;
    None for a login with neither a submission nor a role there (no row of the gradebook)."""
    student = session.scalar(select(User).where(User.username == username))
    if student is None:
        return None
    subs = list(session.scalars(
        select(Submission).where(Submission.user_id == student.id, Submission.assignment_id == assignment.id)
        .options(selectinload(Submission.runs)).order_by(Submission.id.desc())))
    if not subs and role_in(session, student.id, assignment.id) is None:
        return None
    return student, subs
