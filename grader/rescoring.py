"""Scoring an assignment's stored measurements again under its current rubric, without a GPU
(issue 53): what would change per student is shown first (preview: `grader rescore`, the
settings page's button), and only a confirmed preview is written (apply), in the caller's one
transaction, each changed run with an audit event (`rescored`: the run's score and the changed
problems' points before and after) and its problems' stored points, status and message before
kept in their details (`before_rescore`), so nothing is lost.

Which runs: every `scored` run of the assignment, each from its own stored measurements
(worker.rescoring.rescore_run), against the current rubric and the calibrated targets stored now
for the GPU model it was measured on (as a worker would score it today). A run that reused an
earlier run's measurements (grader.runs.reuse) holds their copy, so it is scored the same way;
a run passed over for timing holds no speed figure, so it keeps no speed points ("not measured")
until it is timed. Runs not yet scored (queued, in their checks, waiting for a timing) are left
out: their timing scores them under the current rubric. A run that cannot be scored again from
what it stored (worker.rescoring.RescoreRefused) is listed with why and keeps its score.

*Why every scored run, not only the counted ones:* under the "best" policy, or after a pin,
another run may count; scoring them all keeps the gradebook's choice honest. The preview
computes the gradebook after the change inside a savepoint that is always rolled back
(grader.schedule_changes' pattern), so the counted run and each grade shown are those the
gradebook will show."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from grader.auth.audit import Event, Via, record
from grader.course.grades import points_text
from grader.models import Assignment, AuditEvent, ProblemResult, Run, RunState, Submission, User, utcnow
from grader.reads.gpu_info import run_gpu_models
from grader.reads.gradebook_reads import Gradebook, GradebookRow, gradebook
from grader.service import calibrated_targets_for, get_assignment
from grader.settings import Settings
from worker.rescoring import Rescored, RescoreRefused, StoredProblem, rescore_run, score_message
from worker.rubric import Rubric, RubricError, load_rubric

BEFORE_KEY = "before_rescore"  # a problem result's details: its points, status and message before


class RescoreError(Exception):
    """The assignment cannot be scored again at all (its rubric does not load, another course's,
    a run changed between the preview and its confirmation)."""


@dataclass(frozen=True)
class RunChange:
    """One scored run whose stored score differs from its measurements' under the rubric."""

    run_id: int
    user_id: int
    login: str
    rescored: Rescored

    @property
    def problems_text(self) -> str:
        """The changed problems, `1.1: 18.5 → 20 of 20; 2.2: 3 → 4.2 of 20`."""
        return "; ".join(f"{p.problem_id}: {points_text(p.before)} → {points_text(p.points)}"
                         + (f" of {points_text(p.max_points)}" if p.max_points != p.max_before else "")
                         for p in self.rescored.changed_problems) or "none (the total only)"


@dataclass(frozen=True)
class Refusal:
    """A scored run that cannot be scored again; it keeps its score."""

    run_id: int
    login: str
    why: str


@dataclass(frozen=True)
class StudentLine:
    """One student the rescoring concerns: their counted run (after the change) and grade."""

    login: str
    name: str | None
    run_id: int | None
    run_before: float | None
    run_after: float | None
    problems: str
    grade_before: float | None
    grade_after: float | None
    why: str

    def cells(self) -> tuple[str, ...]:
        """The preview table's row: student, name, run, run score, problems, grade, why."""
        return (self.login, self.name or "", f"run {self.run_id}" if self.run_id else "none",
                f"{_points(self.run_before)} → {_points(self.run_after)}", self.problems,
                f"{_points(self.grade_before)} → {_points(self.grade_after)}", self.why)

    @property
    def text(self) -> str:
        """The line the command line prints."""
        who = f"{self.login} ({self.name})" if self.name and self.name != self.login else self.login
        run = f"run {self.run_id}" if self.run_id else "no run"
        return (f"{who}: {run} {_points(self.run_before)} -> {_points(self.run_after)}, grade "
                f"{_points(self.grade_before)} -> {_points(self.grade_after)}; {self.problems.replace('→', '->')}"
                f" ({self.why})")


def _points(value: float | None) -> str:
    return "no grade" if value is None else points_text(value)


@dataclass(frozen=True)
class RescorePreview:
    """What scoring `slug`'s stored measurements again would do, before anything is written."""

    slug: str
    total_before: float  # the assignment's points now
    total_after: float  # the rubric's
    changes: list[RunChange]  # every scored run whose score changes
    refused: list[Refusal]
    students: list[StudentLine]  # a line per student whose counted run or grade changes, or is refused
    unchanged: int  # scored runs whose score stays

    @property
    def other_runs(self) -> int:
        """Changed runs that count for no one (their students' other runs count)."""
        counted = {line.run_id for line in self.students}
        return sum(1 for c in self.changes if c.run_id not in counted)

    @property
    def digest(self) -> str:
        """A fingerprint of what is written, which a confirmation carries back: a score that
        moved in between shows the preview again instead of writing what nobody saw."""
        lines = [f"{c.run_id}\t{c.rescored.before}\t{c.rescored.total}" for c in self.changes]
        lines += [f"{line.login}\t{line.grade_before}\t{line.grade_after}" for line in self.students]
        lines += [f"total\t{self.total_before}\t{self.total_after}"]
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]


def _rubric(assignment: Assignment, settings: Settings, course: str | None) -> Rubric:
    if course is not None and (assignment.course is None or assignment.course.slug != course):
        raise RescoreError(f"{assignment.slug} is not an assignment of course {course}")
    try:
        return load_rubric(assignment.slug, search=settings.rubric_dirs)
    except RubricError as exc:
        raise RescoreError(f"{assignment.slug}'s rubric does not load: {exc}") from exc


def _scored_runs(session: Session, assignment: Assignment, lock: bool = False) -> list[Run]:
    query = (select(Run).join(Submission).where(Submission.assignment_id == assignment.id,
                                                Run.state == RunState.scored, Run.score.is_not(None))
             .options(selectinload(Run.results), selectinload(Run.submission).selectinload(Submission.user))
             .order_by(Run.id))
    return list(session.scalars(query.with_for_update(of=Run) if lock else query))


def _rescore_all(session: Session, assignment: Assignment, rubric: Rubric,
                 runs: Sequence[Run]) -> tuple[list[RunChange], list[Refusal], int]:
    """Every run scored again: (changed, refused, how many stay the same)."""
    models = run_gpu_models(session, [r.id for r in runs])
    targets = {model: calibrated_targets_for(session, assignment.slug, model) for model in set(models.values())}
    changes, refused, same = [], [], 0
    for run in runs:
        stored = [StoredProblem(p.problem_id, p.points, p.max_points, p.message, p.details) for p in run.results]
        login = run.submission.user.username
        try:
            rescored = rescore_run(rubric, stored, run.score, targets=targets.get(models.get(run.id, "")))
        except RescoreRefused as exc:
            refused.append(Refusal(run.id, login, str(exc)))
            continue
        if rescored.changed:
            changes.append(RunChange(run.id, run.submission.user_id, login, rescored))
        else:
            same += 1
    return changes, refused, same


def _write(session: Session, assignment: Assignment, rubric: Rubric, runs: Sequence[Run],
           changes: Sequence[RunChange]) -> None:
    """Each changed run's new score, message, report and problem results (their earlier points,
    status and message kept under BEFORE_KEY); the assignment's points the rubric's."""
    by_id = {run.id: run for run in runs}
    at = utcnow().isoformat()
    assignment.total_points = rubric.total_points
    for change in changes:
        run, new = by_id[change.run_id], change.rescored
        run.score, run.message, run.report = new.total, score_message(run.message, new), new.report
        rows = {row.problem_id: row for row in run.results}
        for p in new.problems:
            row: ProblemResult = rows[p.problem_id]
            kept = {"points": row.points, "max_points": row.max_points, "status": row.status, "message": row.message,
                    "at": at}
            row.title, row.status, row.points, row.max_points, row.message = (p.title, p.status, p.points,
                                                                              p.max_points, p.message)
            row.details = {**p.details, BEFORE_KEY: kept}
    session.flush()


def preview_rescore(session: Session, slug: str, settings: Settings, course: str | None = None) -> RescorePreview:
    """What scoring `slug`'s scored runs again under its current rubric would change, computed
    inside a savepoint that is rolled back: nothing is written. NotFound: no such assignment;
    RescoreError: its rubric does not load, or it is not of `course`."""
    assignment = get_assignment(session, slug)
    rubric = _rubric(assignment, settings, course)
    zone = ZoneInfo(settings.course_timezone)
    runs = _scored_runs(session, assignment)
    changes, refused, same = _rescore_all(session, assignment, rubric, runs)
    total_before = float(assignment.total_points)
    before = gradebook(session, assignment, tz=zone, search=settings.rubric_dirs)
    savepoint = session.begin_nested()
    try:
        _write(session, assignment, rubric, runs, changes)
        after = gradebook(session, assignment, tz=zone, search=settings.rubric_dirs)
    finally:
        savepoint.rollback()
    students = _student_lines(before, after, {c.run_id: c for c in changes}, {r.run_id: r for r in refused})
    return RescorePreview(slug, total_before, rubric.total_points, changes, refused, students, same)


def _student_lines(before: Gradebook, after: Gradebook, changes: dict[int, RunChange],
                   refused: dict[int, Refusal]) -> list[StudentLine]:
    """A line per student whose counted run changes score, whose grade changes, or whose
    counted run cannot be scored again."""
    old = {row.user_id: row for row in before.rows}
    lines = []
    for row in after.rows:
        was = old.get(row.user_id)
        run_id = row.graded.run_id if row.graded is not None else None
        change = changes.get(run_id) if run_id is not None else None
        refusal = refused.get(run_id) if run_id is not None else None
        grade_before = was.total if was is not None else None
        if change is None and refusal is None and grade_before == row.total:
            continue
        run_before = change.rescored.before if change else row.graded.grade.raw if row.graded else None
        lines.append(StudentLine(row.username, row.full_name, run_id, run_before,
                                 row.graded.grade.raw if row.graded else None,
                                 change.problems_text if change else "none", grade_before, row.total,
                                 _why(was, row, change, refusal, after.policy)))
    return lines


def _why(was: GradebookRow | None, row: GradebookRow, change: RunChange | None, refusal: Refusal | None,
         policy: str) -> str:
    """Why the student's line reads as it does, in words."""
    if refusal is not None:
        return f"not re-scorable, its score stays: {refusal.why}"
    old_run = was.graded.run_id if was is not None and was.graded is not None else None
    new_run = row.graded.run_id if row.graded is not None else None
    if old_run != new_run:
        which = "chosen to count" if row.pin is not None else f"the {policy} policy's pick"
        return f"run {new_run} counts now instead of run {old_run} ({which})"
    if row.grade is not None and row.grade.manual is not None:
        return "a manual grade decides the grade; the run's score changes beneath it"
    if change is not None and was is not None and was.total == row.total:
        return "the grade stays (the late penalty or the staff's entries hold it)"
    return "the current rubric scores its stored measurements so"


def apply_rescore(session: Session, shown: RescorePreview, settings: Settings, via: Via,
                  actor: User | None) -> list[AuditEvent]:
    """Write the scores `shown` previewed, with an audit event per changed run; the caller
    commits (one transaction). RescoreError: a run changed since the preview (nothing written)."""
    assignment = get_assignment(session, shown.slug)
    rubric = _rubric(assignment, settings, None)
    runs = _scored_runs(session, assignment, lock=True)
    current = {run.id: run for run in runs}
    for change in shown.changes:
        run = current.get(change.run_id)
        if run is None or run.score != change.rescored.before:
            raise RescoreError(f"run {change.run_id} changed since the preview: preview it again")
    _write(session, assignment, rubric, runs, shown.changes)
    events = []
    for change in shown.changes:
        detail = _detail(shown.slug, change)
        events.append(record(session, Event.rescored, via, user=current[change.run_id].submission.user, actor=actor,
                             detail=detail))
    session.flush()
    return events


def _detail(slug: str, change: RunChange) -> str:
    """The audit event's detail: the run's score and each changed problem's points, before and
    after (problems dropped, last first, should it pass the column's 512 characters)."""
    new = change.rescored
    problems = {p.problem_id: [p.before, p.points] for p in new.changed_problems}
    while True:
        text = json.dumps({"assignment": slug, "run": change.run_id, "score": [new.before, new.total],
                           "problems": problems}, separators=(",", ":"), ensure_ascii=False)
        if len(text) <= 512 or not problems:
            return text
        problems.pop(next(reversed(problems)))
