"""Typed read queries shared by the REST API, the web pages and the CLI.

Every function here does a fixed, small number of SQL statements whatever the number of
rows (no per-row lazy loads): listings eager-load what they return, and the gradebook reads
all scored runs of an assignment in one statement and their problem results in one more.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any, Generic, Literal, TypeVar

from sqlalchemy import ColumnElement, Select, and_, false, func, or_, select
from sqlalchemy.orm import Session, joinedload, selectinload

from grader.auth import SCOPE_READ, Principal
from grader.course_ops import Refusal, admission, late_checker, lateness
from grader.deadlines import Lateness, LateStatus
from grader.gpu_info import GpuNote, gpu_notes
from grader.grades import Adjustment, Deadlines, Grade, final_grade
from grader.models import (
    Assignment,
    CountedRun,
    CourseRole,
    Enrollment,
    GradeAdjustment,
    ProblemResult,
    Run,
    RunState,
    Submission,
    User,
)
from grader.settings import Settings
from worker.rubric import RubricError, load_rubric

T = TypeVar("T")
Policy = Literal["latest", "best"]
POLICIES: tuple[str, ...] = ("latest", "best")
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


# ---- submissions --------------------------------------------------------------------------


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


def grade_adjustments(session: Session, run_ids: Select[Any] | list[int]) -> dict[int, tuple[Adjustment, ...]]:
    """run id -> the staff's adjustments of each of `run_ids` (ids, or a select of them), oldest
    first; one statement."""
    found: dict[int, list[Adjustment]] = defaultdict(list)
    for run_id, points, reason, by, at in session.execute(
        select(GradeAdjustment.run_id, GradeAdjustment.points, GradeAdjustment.reason, User.username,
               GradeAdjustment.created_at)
        .join(User, User.id == GradeAdjustment.by_id)
        .where(GradeAdjustment.run_id.in_(run_ids))
        .order_by(GradeAdjustment.id)
    ):
        found[run_id].append(Adjustment(float(points), reason, by, at))
    return {run_id: tuple(adjustments) for run_id, adjustments in found.items()}


def run_grades(session: Session, runs: list[Run], tz: tzinfo = UTC) -> dict[int, Grade]:
    """run id -> the final grade of each scored run in `runs` (the gradebook's: the late
    policy of its assignment at its submission's upload time, the student's extension
    included, and the staff's adjustments); `tz` is the zone the reasons show instants in. One
    extension read per assignment, one read of the adjustments."""
    checkers: dict[int, Callable[[int, datetime], Lateness]] = {}
    scored = [run for run in runs if run.state is RunState.scored and run.score is not None]
    adjustments = grade_adjustments(session, [run.id for run in scored]) if scored else {}
    grades = {}
    for run in scored:
        sub = run.submission
        if sub.assignment_id not in checkers:
            checkers[sub.assignment_id] = late_checker(session, sub.assignment)
        lateness = checkers[sub.assignment_id](sub.user_id, sub.uploaded_at).in_zone(tz)
        grades[run.id] = final_grade(run.score or 0.0, sub.assignment.total_points, lateness,
                                     adjustments.get(run.id, ()))
    return grades


@dataclass(frozen=True)
class UploadWindow:
    """One assignment as the upload page shows it to one user now: the deadlines, and why an
    upload would be refused (the upload POST's own rule, course_ops.admission); None: open."""

    deadlines: Deadlines
    refusal: Refusal | None


def upload_windows(session: Session, settings: Settings, user: User, assignments: list[Assignment],
                   now: datetime) -> dict[str, UploadWindow]:
    """slug -> the upload window of each of `assignments` for `user` at `now`."""
    return {a.slug: UploadWindow(Deadlines(lateness(session, a, user.id, now, settings)),
                                 admission(session, settings, user, a, now)) for a in assignments}


# ---- gradebook ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProblemColumn:
    problem_id: str
    title: str
    max_points: float
    target: float | None = None  # the rubric's speedup target (calibrated ones vary per GPU)


@dataclass(frozen=True)
class ScoredRun:
    run_id: int
    submission_id: int
    grade: Grade  # the final grade (grader.grades): raw score, lateness, penalty
    finished_at: datetime | None
    problems: dict[str, float]  # problem id -> points (raw: before a late penalty)
    speedups: dict[str, float] = field(default_factory=dict)  # problem id -> the speedup that scored
    gpu: GpuNote | None = None  # the GPU model it was measured on, and whether that model is calibrated

    @property
    def score(self) -> float:
        """The final grade, after any late penalty."""
        return self.grade.final

    @property
    def raw_score(self) -> float | None:
        """Before a late penalty; None: no penalty applied."""
        return self.grade.raw if self.grade.penalty else None

    @property
    def late(self) -> str | None:
        """The grade's reason when the submission was not on time."""
        return None if self.grade.lateness.status is LateStatus.on_time else self.grade.reason


@dataclass(frozen=True)
class NewestRun:
    run_id: int
    submission_id: int
    state: RunState


@dataclass(frozen=True)
class GradebookRow:
    user_id: int
    username: str
    submissions: int
    latest: ScoredRun | None  # scored run of the newest submission that has one
    best: ScoredRun | None  # highest score over every scored run (ties: the newer)
    graded: ScoredRun | None  # the one that counts: staff's pin, else the one the policy picks
    full_name: str | None = None
    section: str | None = None
    newest: NewestRun | None = None  # the student's most recent run, whatever its state
    pin: Pin | None = None  # staff chose `graded` (a scored run), not the policy

    @property
    def total(self) -> float | None:
        return self.graded.score if self.graded else None


@dataclass(frozen=True)
class Gradebook:
    assignment: str
    title: str
    total_points: float
    policy: str
    problems: list[ProblemColumn]
    rows: list[GradebookRow] = field(default_factory=list)


def _problem_columns(session: Session, assignment: Assignment, run_ids: list[int]) -> list[ProblemColumn]:
    """The rubric's problems in rubric order, plus any problem id found only in results."""
    columns: dict[str, ProblemColumn] = {}
    try:
        for p in load_rubric(assignment.slug).problems:
            columns[p.id] = ProblemColumn(p.id, p.title, p.points, p.scoring.target)
    except RubricError:
        pass
    if run_ids:
        for pid, title, max_points in session.execute(
            select(ProblemResult.problem_id, func.max(ProblemResult.title), func.max(ProblemResult.max_points))
            .where(ProblemResult.run_id.in_(run_ids))
            .group_by(ProblemResult.problem_id)
            .order_by(ProblemResult.problem_id)
        ):
            columns.setdefault(pid, ProblemColumn(pid, title, float(max_points)))
    return list(columns.values())


@dataclass(frozen=True)
class _Scored:
    user_id: int
    submission_id: int
    run_id: int
    grade: Grade
    finished_at: datetime | None

    def key(self, policy: str) -> tuple[float, int, int]:
        """What the score policy maximises: "latest" the newest submission (its newest run),
        "best" the final grade (ties: the newer)."""
        newer = (self.submission_id, self.run_id)
        return (0.0, *newer) if policy == "latest" else (self.grade.final, *newer)


@dataclass(frozen=True)
class Pin:
    """Staff's choice of the run that counts for one student (a CountedRun row)."""

    run_id: int
    by: str
    reason: str | None


def counted_pins(session: Session, assignment_id: int, user_id: int | None = None) -> dict[int, Pin]:
    """user id -> the run staff chose to count in the assignment (of `user_id` alone, unless
    None); one statement."""
    query = (select(CountedRun.user_id, CountedRun.run_id, User.username, CountedRun.reason)
             .join(User, User.id == CountedRun.by_id).where(CountedRun.assignment_id == assignment_id))
    if user_id is not None:
        query = query.where(CountedRun.user_id == user_id)
    return {uid: Pin(run_id, by, reason) for uid, run_id, by, reason in session.execute(query)}


def counting_run(runs: list[Run], grades: Mapping[int, Grade], policy: str, pin: Pin | None = None) -> int | None:
    """The id of the run among one student's `runs` of one assignment that the gradebook
    counts: staff's `pin` while that run is scored, else the pick of `policy` (`grades`:
    run_grades of them); None without a scored run."""
    if pin is not None and pin.run_id in grades:
        return pin.run_id
    scored = [_Scored(r.submission.user_id, r.submission_id, r.id, grades[r.id], r.finished_at)
              for r in runs if r.id in grades]
    return max(scored, key=lambda r: r.key(policy)).run_id if scored else None


def gradebook(session: Session, assignment: Assignment, policy: str | None = None,
              tz: tzinfo = UTC) -> Gradebook:
    """One row per student (every student enrolled in the assignment, plus anyone else who
    submitted to it), ordered by login.

    Only runs in state `scored` count: an infrastructure failure or a run still in flight
    never replaces a score. "latest": the newest submission that has a scored run (its
    newest scored run, so a re-grade replaces the earlier grade of the same upload);
    "best": the highest score of any scored run. `policy` None: the assignment's own. A
    submission uploaded late keeps the late policy's share of its score (its upload time,
    the student's extension included), a run's staff adjustments are added (grader.grades),
    and "best" compares the final grades; a run staff pinned (counted_pins) counts instead of
    the policy's pick while it is scored. `tz` is the zone the grades' reasons show instants in."""
    policy = policy or assignment.score_policy
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}")
    counts: dict[int, int] = dict(
        session.execute(  # type: ignore[arg-type]
            select(Submission.user_id, func.count(Submission.id))
            .where(Submission.assignment_id == assignment.id)
            .group_by(Submission.user_id)
        ).all()
    )
    students = select(Enrollment.user_id).where(Enrollment.assignment_id == assignment.id,
                                                Enrollment.role == CourseRole.student)
    users = session.scalars(
        select(User).where(User.id.in_(students) | User.id.in_(list(counts) or [-1])).order_by(User.username)
    ).all()
    lateness = late_checker(session, assignment)
    scored_runs = (select(Submission.user_id, Run.submission_id, Run.id, Run.score, Run.finished_at,
                          Submission.uploaded_at)
                   .join(Run, Run.submission_id == Submission.id)
                   .where(Submission.assignment_id == assignment.id, Run.state == RunState.scored,
                          Run.score.is_not(None)))
    adjustments = grade_adjustments(session, select(scored_runs.subquery().c.id))
    scored: list[_Scored] = []
    for user_id, submission_id, run_id, score, finished_at, uploaded_at in session.execute(scored_runs):
        grade = final_grade(score or 0.0, assignment.total_points, lateness(user_id, uploaded_at).in_zone(tz),
                            adjustments.get(run_id, ()))
        scored.append(_Scored(user_id, submission_id, run_id, grade, finished_at))
    latest: dict[int, _Scored] = {}
    best: dict[int, _Scored] = {}
    for row in scored:
        uid = row.user_id
        if uid not in latest or row.key("latest") > latest[uid].key("latest"):
            latest[uid] = row
        if uid not in best or row.key("best") > best[uid].key("best"):
            best[uid] = row
    by_id = {row.run_id: row for row in scored}
    pins = {uid: pin for uid, pin in counted_pins(session, assignment.id).items() if pin.run_id in by_id}
    chosen_ids = sorted({r.run_id for r in latest.values()} | {r.run_id for r in best.values()}
                        | {pin.run_id for pin in pins.values()})
    points: dict[int, dict[str, float]] = defaultdict(dict)
    speedups: dict[int, dict[str, float]] = defaultdict(dict)
    if chosen_ids:
        # The scoring speedup is read inside the JSON by the database, not the whole details.
        for run_id, pid, pts, speedup in session.execute(
            select(ProblemResult.run_id, ProblemResult.problem_id, ProblemResult.points,
                   ProblemResult.details[("score", "speedup", "speedup")].as_float())
            .where(ProblemResult.run_id.in_(chosen_ids))
        ):
            points[run_id][pid] = float(pts)
            if speedup is not None:
                speedups[run_id][pid] = float(speedup)
    newest = _newest_runs(session, assignment)
    gpus = gpu_notes(session, assignment.id, chosen_ids)

    def as_scored(row: _Scored | None) -> ScoredRun | None:
        if row is None:
            return None
        return ScoredRun(run_id=row.run_id, submission_id=row.submission_id, grade=row.grade,
                         finished_at=row.finished_at, problems=dict(points.get(row.run_id, {})),
                         speedups=dict(speedups.get(row.run_id, {})), gpu=gpus.get(row.run_id))

    rows = []
    for user in users:
        lat, bst = as_scored(latest.get(user.id)), as_scored(best.get(user.id))
        pin = pins.get(user.id)
        graded = as_scored(by_id[pin.run_id]) if pin else lat if policy == "latest" else bst
        rows.append(GradebookRow(user_id=user.id, username=user.username, submissions=counts.get(user.id, 0),
                                 latest=lat, best=bst, graded=graded, full_name=user.full_name,
                                 section=user.section, newest=newest.get(user.id), pin=pin))
    return Gradebook(
        assignment=assignment.slug,
        title=assignment.title,
        total_points=assignment.total_points,
        policy=policy,
        problems=_problem_columns(session, assignment, chosen_ids),
        rows=rows,
    )


def _newest_runs(session: Session, assignment: Assignment) -> dict[int, NewestRun]:
    """Each student's most recent run of the assignment (highest id), one statement."""
    newest_id = (
        select(Submission.user_id.label("user_id"), func.max(Run.id).label("run_id"))
        .join(Run, Run.submission_id == Submission.id)
        .where(Submission.assignment_id == assignment.id)
        .group_by(Submission.user_id)
        .subquery()
    )
    return {
        uid: NewestRun(run_id, sub_id, state)
        for uid, run_id, sub_id, state in session.execute(
            select(newest_id.c.user_id, Run.id, Run.submission_id, Run.state).join(Run, Run.id == newest_id.c.run_id)
        )
    }


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
