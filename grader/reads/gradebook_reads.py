"""The gradebook read: one row per student of an assignment with the run that counts, its
latest and best scored runs, points per problem, the GPU it was measured on, and the student's
grade (the counted run's with the staff's entries: grader.course.grades.student_grade).

It does a fixed number of SQL statements whatever the number of rows: all scored runs of
the assignment in one statement and the problem results of the chosen ones in one more."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.course.deadlines import Lateness, LateStatus
from grader.course.grade_reads import Candidate, Pin, counted_pins, grade_entries
from grader.course.grades import Grade, final_grade, student_grade
from grader.course.policies import late_checker
from grader.course.roster_entries import entries_of, shown_name
from grader.models import Assignment, Course, CourseRole, Enrollment, ProblemResult, Run, RunState, Submission, User
from grader.reads.gpu_info import GpuNote, gpu_notes
from worker.rubric import RubricError, load_rubric

Policy = Literal["latest", "best"]
POLICIES: tuple[str, ...] = ("latest", "best")


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
    grade: Grade  # the run's own grade (grader.course.grades): raw score, lateness, penalty
    finished_at: datetime | None
    problems: dict[str, float]  # problem id -> points (raw: before a late penalty)
    speedups: dict[str, float] = field(default_factory=dict)  # problem id -> the speedup that scored
    gpu: GpuNote | None = None  # the GPU model it was measured on, and whether that model is calibrated

    @property
    def score(self) -> float:
        """The run's grade, after any late penalty."""
        return self.grade.final

    @property
    def raw_score(self) -> float | None:
        """Before a late penalty; None: no penalty applied."""
        return self.grade.raw if self.grade.penalty else None

    @property
    def late(self) -> str | None:
        """The grade's reason when the submission was not on time."""
        on_time = self.grade.lateness is None or self.grade.lateness.status is LateStatus.on_time
        return None if on_time else self.grade.reason


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
    full_name: str | None = None  # the course's roster's name, else the account's display name
    section: str | None = None
    newest: NewestRun | None = None  # the student's most recent run, whatever its state
    pin: Pin | None = None  # staff chose `graded` (a scored run), not the policy
    grade: Grade | None = None  # the student's: `graded`'s grade with the staff's entries (a manual grade alone)
    canvas_user_id: str | None = None  # Canvas's ids of the student, from the course's roster
    sis_user_id: str | None = None
    sis_login_id: str | None = None  # in Canvas's case; None: the roster gave none

    @property
    def total(self) -> float | None:
        return self.grade.final if self.grade else None


@dataclass(frozen=True)
class Gradebook:
    assignment: str
    title: str
    total_points: float
    policy: str
    problems: list[ProblemColumn]
    rows: list[GradebookRow] = field(default_factory=list)
    canvas_id: str | None = None  # the assignment's id in Canvas, set by staff


def _problem_columns(session: Session, assignment: Assignment, run_ids: list[int],
                     search: Sequence[Path]) -> list[ProblemColumn]:
    """The rubric's problems in rubric order, plus any problem id found only in results."""
    columns: dict[str, ProblemColumn] = {}
    try:
        for p in load_rubric(assignment.slug, search=search).problems:
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


def _submission_counts(session: Session, assignment: Assignment) -> dict[int, int]:
    """user id -> how many submissions they uploaded to `assignment`."""
    return dict(
        session.execute(  # type: ignore[arg-type]
            select(Submission.user_id, func.count(Submission.id))
            .where(Submission.assignment_id == assignment.id)
            .group_by(Submission.user_id)
        ).all()
    )


def _gradebook_users(session: Session, assignment: Assignment, counts: dict[int, int]) -> Sequence[User]:
    """The course's students plus anyone else who submitted (`counts`' users), ordered by login."""
    students = select(Enrollment.user_id).where(Enrollment.course_id == assignment.course_id,
                                                Enrollment.role == CourseRole.student)
    return session.scalars(
        select(User).where(User.id.in_(students) | User.id.in_(list(counts) or [-1])).order_by(User.username)
    ).all()


def _scored_candidates(session: Session, assignment: Assignment, lateness: Callable[[int, datetime], Lateness],
                       tz: tzinfo) -> list[Candidate]:
    """Every scored run of `assignment`, graded with its submission's lateness (reasons shown in `tz`)."""
    scored_runs = (select(Submission.user_id, Run.submission_id, Run.id, Run.score, Run.finished_at,
                          Submission.uploaded_at)
                   .join(Run, Run.submission_id == Submission.id)
                   .where(Submission.assignment_id == assignment.id, Run.state == RunState.scored,
                          Run.score.is_not(None)))
    scored: list[Candidate] = []
    for user_id, submission_id, run_id, score, finished_at, uploaded_at in session.execute(scored_runs):
        grade = final_grade(score or 0.0, assignment.total_points, lateness(user_id, uploaded_at).in_zone(tz))
        scored.append(Candidate(user_id, submission_id, run_id, grade, finished_at))
    return scored


def _policy_picks(scored: list[Candidate]) -> tuple[dict[int, Candidate], dict[int, Candidate]]:
    """user id -> the run each policy picks: ("latest" picks, "best" picks)."""
    latest: dict[int, Candidate] = {}
    best: dict[int, Candidate] = {}
    for row in scored:
        uid = row.user_id
        if uid not in latest or row.key("latest") > latest[uid].key("latest"):
            latest[uid] = row
        if uid not in best or row.key("best") > best[uid].key("best"):
            best[uid] = row
    return latest, best


def _problem_points(session: Session,
                    run_ids: list[int]) -> tuple[dict[int, dict[str, float]], dict[int, dict[str, float]]]:
    """run id -> problem id -> points, and run id -> problem id -> the speedup that scored (one statement)."""
    points: dict[int, dict[str, float]] = defaultdict(dict)
    speedups: dict[int, dict[str, float]] = defaultdict(dict)
    if run_ids:
        # The scoring speedup is read inside the JSON by the database, not the whole details.
        for run_id, pid, pts, speedup in session.execute(
            select(ProblemResult.run_id, ProblemResult.problem_id, ProblemResult.points,
                   ProblemResult.details[("score", "speedup", "speedup")].as_float())
            .where(ProblemResult.run_id.in_(run_ids))
        ):
            points[run_id][pid] = float(pts)
            if speedup is not None:
                speedups[run_id][pid] = float(speedup)
    return points, speedups


@dataclass(frozen=True)
class _ChosenRuns:
    """What the gradebook shows of the runs it chose beyond their grade, by run id."""

    points: dict[int, dict[str, float]]
    speedups: dict[int, dict[str, float]]
    gpus: dict[int, GpuNote]

    def scored(self, row: Candidate | None) -> ScoredRun | None:
        """The gradebook's view of `row` (a fresh one each call, with its own dicts)."""
        if row is None:
            return None
        return ScoredRun(run_id=row.run_id, submission_id=row.submission_id, grade=row.grade,
                         finished_at=row.finished_at, problems=dict(self.points.get(row.run_id, {})),
                         speedups=dict(self.speedups.get(row.run_id, {})), gpu=self.gpus.get(row.run_id))


def gradebook(session: Session, assignment: Assignment, policy: str | None = None,
              tz: tzinfo = UTC, search: Sequence[Path] = ()) -> Gradebook:
    """One row per student (every student enrolled in the assignment, plus anyone else who
    submitted to it), ordered by login.

    Only runs in state `scored` count: an infrastructure failure or a run still in flight
    never replaces a score. "latest": the newest submission that has a scored run (its
    newest scored run, so a re-grade replaces the earlier grade of the same upload);
    "best": the highest score of any scored run. `policy` None: the assignment's own. A
    submission uploaded late keeps the late policy's share of its score (its upload time,
    the student's extension included), "best" compares those grades, and a run staff pinned
    (counted_pins) counts instead of the policy's pick while it is scored; the row's grade adds
    the staff's entries on the student's grade to the counted run's (grader.course.grades). `tz` is the zone the grades' reasons show instants in,
    `search` the folders searched for the rubric after rubrics/ (the settings' rubric_dirs)."""
    policy = policy or assignment.score_policy
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}")
    counts = _submission_counts(session, assignment)
    users = _gradebook_users(session, assignment, counts)
    lateness = late_checker(session, assignment)
    entries = grade_entries(session, assignment.id)
    scored = _scored_candidates(session, assignment, lateness, tz)
    latest, best = _policy_picks(scored)
    by_id = {row.run_id: row for row in scored}
    pins = {uid: pin for uid, pin in counted_pins(session, assignment.id).items() if pin.run_id in by_id}
    chosen_ids = sorted({r.run_id for r in latest.values()} | {r.run_id for r in best.values()}
                        | {pin.run_id for pin in pins.values()})
    points, speedups = _problem_points(session, chosen_ids)
    newest = _newest_runs(session, assignment)
    chosen = _ChosenRuns(points, speedups, gpu_notes(session, assignment.id, chosen_ids))
    roster = entries_of(session, assignment.course_id)
    rows = []
    for user in users:
        lat, bst = chosen.scored(latest.get(user.id)), chosen.scored(best.get(user.id))
        pin = pins.get(user.id)
        graded = chosen.scored(by_id[pin.run_id]) if pin else lat if policy == "latest" else bst
        student = student_grade(graded.grade if graded else None, entries.get(user.id, ()), assignment.total_points,
                              assignment.extra_credit_points)
        entry = roster.get(user.id)
        rows.append(GradebookRow(user_id=user.id, username=user.username, submissions=counts.get(user.id, 0),
                                 latest=lat, best=bst, graded=graded, full_name=shown_name(entry, user),
                                 newest=newest.get(user.id), pin=pin, grade=student,
                                 **(_roster_ids(entry) if entry is not None else {})))
    return Gradebook(
        assignment=assignment.slug,
        title=assignment.title,
        total_points=assignment.total_points,
        policy=policy,
        problems=_problem_columns(session, assignment, chosen_ids, search),
        rows=rows,
        canvas_id=assignment.canvas_assignment_id,
    )


def _roster_ids(entry: Enrollment) -> dict[str, str | None]:
    """A gradebook row's fields from the course's roster: the section and Canvas's ids."""
    return {"section": entry.section, "canvas_user_id": entry.canvas_user_id, "sis_user_id": entry.sis_user_id,
            "sis_login_id": entry.sis_login_id}


def course_gradebooks(session: Session, course: Course, policy: str | None = None, tz: tzinfo = UTC,
                      search: Sequence[Path] = ()) -> list[Gradebook]:
    """The gradebook of each of the course's assignments, by slug (gradebook: a fixed number of
    statements each)."""
    return [gradebook(session, assignment, policy, tz, search) for assignment in course.assignments]


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
