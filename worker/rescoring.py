"""A run's stored measurements scored again under a rubric, without a GPU (pure; no database).

A scored run keeps, per problem, what the parent measured (`details["measurement"]`,
worker.measurements.ProblemMeasurement's dict) beside the score it earned. When the rubric's
points, targets or scoring rules change after grading, `rescore_run` scores those measurements
again with the very scorer a worker uses (worker.scoring.score_run), so the new points are the
ones a fresh grade of the same measurements would get. grader/rescoring.py previews and applies
it for an assignment.

A run is *not re-scorable* (RescoreRefused, with why in words; its stored score is never
touched) when a problem has no stored measurement dict (graded before measurements were kept)
or one that cannot be read, when the rubric has a problem the run never measured (only a
re-grade on a GPU can measure it), or when the run holds a problem the rubric no longer has.
A problem left out for a kernel that did not build is stored with its score and no
measurement: it stays at 0 with its stored message (its max points follow the rubric).

Standard library + the scorer's own imports only: importable on a bare GPU machine.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.measurements import ProblemMeasurement
from worker.report import gradescope_results
from worker.rubric import Rubric
from worker.scoring import score_run

_SCORED = re.compile(r"^Scored \S+ / \S+?\.(?=\s|$)")


class RescoreRefused(Exception):
    """The run cannot be scored again from what it stored; the message says why, in words."""


@dataclass(frozen=True)
class StoredProblem:
    """One problem result as a run stored it (grader.models.ProblemResult)."""

    problem_id: str
    points: float
    max_points: float
    message: str | None = None
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RescoredProblem:
    """A problem's result scored again: what a ProblemResult row holds."""

    problem_id: str
    title: str
    status: str
    points: float
    max_points: float
    message: str
    details: dict[str, Any]
    before: float  # the stored points
    max_before: float

    @property
    def changed(self) -> bool:
        return round(self.points, 2) != round(self.before, 2) or round(self.max_points, 2) != round(self.max_before, 2)


@dataclass(frozen=True)
class Rescored:
    """A run's stored measurements scored under a rubric: per problem, the total, the report."""

    before: float | None  # the run's stored score
    total: float
    max_total: float
    problems: list[RescoredProblem]
    report: dict[str, Any] = field(default_factory=dict)  # Gradescope-format results.json

    @property
    def changed(self) -> bool:
        return (self.before is None or round(self.total, 2) != round(self.before, 2)
                or any(p.changed for p in self.problems))

    @property
    def changed_problems(self) -> list[RescoredProblem]:
        return [p for p in self.problems if p.changed]


def _measurements(rubric: Rubric, stored: Sequence[StoredProblem]) -> dict[str, ProblemMeasurement | None]:
    """problem id -> its stored measurement (None: left out, not measured); RescoreRefused when
    the stored problems and the rubric's do not match or a measurement cannot be read."""
    if not stored:
        raise RescoreRefused("no problem result is stored")
    by_id = {p.problem_id: p for p in stored}
    known = [p.id for p in rubric.problems]
    gone = sorted(set(by_id) - set(known))
    if gone:
        raise RescoreRefused(f"problem {', '.join(gone)} is no longer in the rubric")
    new = [pid for pid in known if pid not in by_id]
    if new:
        raise RescoreRefused(f"the rubric's problem {', '.join(new)} was never measured in this run: "
                             "only a re-grade can measure it")
    found: dict[str, ProblemMeasurement | None] = {}
    for pid in known:
        details = by_id[pid].details
        if not isinstance(details, Mapping) or "measurement" not in details:
            raise RescoreRefused(f"problem {pid}: no measurement is stored (graded before they were kept)")
        raw = details["measurement"]
        if raw is None:
            if by_id[pid].points > 0:
                raise RescoreRefused(f"problem {pid}: it earned points but its measurement is missing")
            found[pid] = None
            continue
        try:
            found[pid] = ProblemMeasurement.from_dict(dict(raw))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RescoreRefused(f"problem {pid}: its stored measurement cannot be read ({exc})") from exc
        if found[pid].problem_id != pid:  # type: ignore[union-attr]
            raise RescoreRefused(f"problem {pid}: its stored measurement is of problem {raw.get('problem_id')}")
    return found


def rescore_run(rubric: Rubric, stored: Sequence[StoredProblem], before: float | None = None, *,
                targets: Mapping[str, float] | None = None) -> Rescored:
    """The run's stored measurements (`stored`, its problem results) scored under `rubric`, with
    `targets` (per-GPU calibrated speedups, as a worker would use now) over the rubric's. `before`:
    the run's stored score. RescoreRefused: not re-scorable (the module's docstring says when)."""
    measurements = _measurements(rubric, stored)
    measured = {pid: m for pid, m in measurements.items() if m is not None}
    try:
        run_score = score_run(rubric, measured, targets=targets)
    except ValueError as exc:
        raise RescoreRefused(f"the rubric cannot score it: {exc}") from exc
    by_id = {p.problem_id: p for p in stored}
    titles = {p.id: p.title for p in rubric.problems}
    problems = []
    for s in run_score.problems:
        old = by_id[s.problem_id]
        left_out = measurements[s.problem_id] is None
        if left_out and old.message:  # not graded for want of a kernel: keep the stored words
            s.reasons = [f"{s.problem_id}: {old.message}; 0 of {s.max_points:g} points"]
        if left_out:
            message = old.message or "not graded"
        else:
            message = "; ".join(s.reasons) if s.reasons else "full marks"
        m = measurements[s.problem_id]
        problems.append(RescoredProblem(
            problem_id=s.problem_id, title=titles[s.problem_id], status=s.status, points=s.points,
            max_points=s.max_points, message=message,
            details={"score": s.to_dict(), "measurement": m.to_dict() if m is not None else None},
            before=float(old.points), max_before=float(old.max_points)))
    return Rescored(before=before, total=run_score.total, max_total=run_score.max_total, problems=problems,
                    report=gradescope_results(rubric, run_score, list(measured.values())))


def score_message(old: str | None, rescored: Rescored) -> str:
    """The run's message with its leading "Scored X / Y." (worker.pipeline's) made the new
    total's; a message that does not start so gets the sentence in front."""
    head = f"Scored {rescored.total:g} / {rescored.max_total:g}."
    rest = _SCORED.sub("", old or "", count=1).strip()
    return f"{head} {rest}" if rest else head
