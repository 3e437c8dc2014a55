"""How long grades take, measured: the capacity model's grade times (`grader capacity`) and the
run page's queue ETA both read them here, so the two agree (grader/capacity/model.py).

A grade's time is from its worker's claim to its end: what the run holds its worker for, and a
GPU worker's GPU (one run at a time per GPU); for a run graded in two pieces (issue 55), the two
pieces' own seconds, not the wait for the GPU between them. Runs that took more than one attempt are left out:
their span includes the wait between attempts; so are runs that reused an earlier run's
measurements (grader/runs/reuse.py): they measured nothing, in a second or two. The GPU model is read from the measurements'
telemetry (grader/reads/gpu_info.py).

The capacity model's second schedule runs a grade's timing apart from its checks, so it needs
each grade's time split in two: `grade_splits` reads the timing part from what the run's
measurements recorded (grader/reads/gpu_phases.py `timing_seconds`: as the assignment's plug-in
reads its stage's phases), and `with_timing` fills
in DEFAULT_TIMING_SHARE for a run that recorded none. A run timed in a piece of its own recorded
its turns on the GPU's lock (`lock_turns`): its timing is what that piece held, shared (its
children's start, the model's `timing_shared`) and alone, and the seconds it waited for the
lock are no one's work, so they leave its grade time.
"""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Select, exists, select
from sqlalchemy.orm import Session

from grader.models import ProblemResult, Run, RunState, Submission
from grader.reads.gpu_info import gpu_name
from grader.reads.gpu_phases import lock_turns, timing_seconds
from worker.assignment import Plugin

GRADED = (RunState.scored, RunState.built)  # failures end early and would skew the times
STAGE_NAMES = ("unpack", "stage", "build", "reference", "run")  # worker.pipeline's records, in order
# The timing's share of a grade whose run recorded no phases (or a grade time given by hand):
# about half, on the H200 (docs/benchmarks/grade-time.md, 2026-12-04): the kit's four kernel timings 22.3 s, a
# correct Problem 3's three timed pairs 61.9 s and the verification of one 11.4 s, 95.6 s in all,
# of a real submission's whole grade of 160-210 s (185 s in the middle).
DEFAULT_TIMING_SHARE = 0.5


class GradeSplit(NamedTuple):
    """One grade's seconds of work and the timing part of them."""

    held: float  # what the run held its worker for, less any wait for the GPU's lock
    timing: float | None  # of which timing; None: its measurements recorded no phases
    timing_shared: float = 0.0  # of the timing, the GPU held shared (a timing piece's set-up)


def _recent(query: Select, sample: int, assignment_id: int | None, gpu_model: str | None,
            states: Collection[RunState]) -> Select:
    """`query` narrowed to the `sample` most recent single-attempt runs in `states` (of the
    assignment and GPU model, when given), newest first."""
    query = query.where(Run.state.in_(list(states)), Run.started_at.is_not(None), Run.finished_at.is_not(None),
                        Run.attempts <= 1, Run.reused_from.is_(None))
    if assignment_id is not None:
        query = query.join(Submission, Run.submission_id == Submission.id).where(Submission.assignment_id == assignment_id)
    if gpu_model is not None:
        query = query.where(exists().where(ProblemResult.run_id == Run.id, gpu_name() == gpu_model))
    return query.order_by(Run.finished_at.desc(), Run.id.desc()).limit(sample)


def _held_seconds(started: datetime, finished: datetime, stages: dict[str, Any] | None) -> float:
    """What a run held its worker for: claim to end; for a run graded in two pieces (a
    `timing_run` record), its pieces' stage records added up: between the two it only waited."""
    if stages and "timing_run" in stages:
        return float(sum(float((record or {}).get("seconds") or 0.0) for record in stages.values()))
    return (finished - started).total_seconds()


def grade_seconds(session: Session, sample: int, assignment_id: int | None = None, gpu_model: str | None = None,
                  states: Collection[RunState] = GRADED) -> list[float]:
    """Seconds each of the `sample` most recent runs held its worker (newest first)."""
    rows = session.execute(_recent(select(Run.started_at, Run.finished_at, Run.stages), sample, assignment_id,
                                   gpu_model, states))
    return [_held_seconds(started, finished, stages) for started, finished, stages in rows]


def graded_in_pieces(session: Session, sample: int, assignment_id: int | None = None) -> bool:
    """Whether the workers grade in two pieces now: the newest of the `sample` recent runs was
    (its `timing_run` record)."""
    newest = session.scalars(_recent(select(Run.stages), 1, assignment_id, None, GRADED)).first()
    return bool(newest and "timing_run" in newest)


def grade_splits(session: Session, sample: int, assignment_id: int | None = None, gpu_model: str | None = None,
                 states: Collection[RunState] = GRADED, *, plugin: Plugin | None) -> list[GradeSplit]:
    """The same runs as `grade_seconds`, each split into its checks and its timing (a whole
    grade's as `plugin`, the assignment's, reads it)."""
    runs = session.execute(_recent(select(Run.id, Run.started_at, Run.finished_at, Run.stages), sample, assignment_id,
                                   gpu_model, states)).all()
    measurements: dict[int, dict[str, dict[str, Any]]] = {run_id: {} for run_id, _, _, _ in runs}
    rows = session.execute(select(ProblemResult.run_id, ProblemResult.problem_id, ProblemResult.details)
                           .where(ProblemResult.run_id.in_(list(measurements))))
    for run_id, problem_id, details in rows:
        measurements[run_id][problem_id] = (details or {}).get("measurement") or {}
    return [_split(_held_seconds(started, finished, stages), measurements[run_id], plugin)
            for run_id, started, finished, stages in runs]


def _split(held: float, measurements: dict[str, dict[str, Any]], plugin: Plugin | None) -> GradeSplit:
    turns = lock_turns(measurements)
    if turns is None:
        return GradeSplit(held, timing_seconds(measurements, plugin))
    shared, alone = turns.get("shared", 0.0), turns.get("alone", 0.0)
    waited = turns.get("waited_shared", 0.0) + turns.get("waited_alone", 0.0)
    return GradeSplit(max(held - waited, shared + alone), shared + alone, shared)


def with_timing(splits: Sequence[GradeSplit], share: float = DEFAULT_TIMING_SHARE) -> list[float]:
    """Each grade's timing seconds: as recorded (at most the grade's time: the phases are on the
    stage's clock, the grade on the database's), else `share` of the grade."""
    return [share * s.held if s.timing is None else min(s.timing, s.held) for s in splits]


def stage_medians(session: Session, sample: int, assignment_id: int | None = None, gpu_model: str | None = None,
                  states: Collection[RunState] = GRADED) -> dict[str, float]:
    """The median seconds of each pipeline stage (worker.pipeline's record in `runs.stages`) over
    the same runs as `grade_seconds`; a stage none of them ran is absent."""
    columns = [Run.stages[(name, "seconds")].as_float() for name in STAGE_NAMES]
    rows = session.execute(_recent(select(*columns), sample, assignment_id, gpu_model, states)).all()
    medians = {}
    for i, name in enumerate(STAGE_NAMES):
        seconds = [row[i] for row in rows if row[i] is not None]
        if seconds:
            medians[name] = statistics.median(seconds)
    return medians


def graded_gpu_models(session: Session, sample: int, assignment_id: int | None = None) -> Counter[str]:
    """GPU model -> how many of the `sample` most recent scored runs it graded."""
    recent = _recent(select(Run.id), sample, assignment_id, None, (RunState.scored,)).subquery()
    rows = session.execute(select(ProblemResult.run_id, gpu_name()).where(ProblemResult.run_id.in_(select(recent.c.id))))
    return Counter(model for model in dict(rows.all()).values() if model)
