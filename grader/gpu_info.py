"""Which GPU model graded a run, and whether that model has a stored calibration.

The model is read from the telemetry the stage records with every problem's measurement, at
the paths the assignment's plug-in names (worker.assignment.Assignment.gpu_name_keys), inside
the JSON by the database. A model without a GpuCalibration row for the assignment
(`grader calibrate` was not run on it) is scored against the rubric's course targets, which
our own reference kit may not reach there (BENCHMARKS.md): such grades deserve a second look.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grader.models import Assignment, GpuCalibration, ProblemResult
from worker.assignment import assignment_of
from worker.rubric import load_rubric


@dataclass(frozen=True)
class GpuNote:
    model: str
    calibrated: bool  # a calibration for this model is stored for the run's assignment


def run_gpu_models(session: Session, slug: str, run_ids: Collection[int]) -> dict[int, str]:
    """run id -> the GPU model its measurements were taken on (runs without any: absent), for
    runs of the assignment `slug`."""
    keys = assignment_of(load_rubric(slug)).gpu_name_keys if run_ids else ()
    if not keys:
        return {}
    names = [ProblemResult.details[("measurement", "telemetry", *key)].as_string() for key in keys]
    name = names[0] if len(names) == 1 else func.coalesce(*names)  # SQLite's coalesce needs two
    rows = session.execute(
        select(ProblemResult.run_id, func.max(name)).where(ProblemResult.run_id.in_(list(run_ids)))
        .group_by(ProblemResult.run_id)
    )
    return {run_id: model for run_id, model in rows if model}


def calibrated_models(session: Session, assignment_id: int) -> set[str]:
    return set(session.scalars(select(GpuCalibration.gpu_name).where(GpuCalibration.assignment_id == assignment_id)))


def gpu_notes(session: Session, assignment_id: int, run_ids: Collection[int]) -> dict[int, GpuNote]:
    """run id -> its GPU model and whether that model is calibrated for `assignment_id`."""
    row = session.get(Assignment, assignment_id)
    models = run_gpu_models(session, row.slug, run_ids) if row is not None else {}
    calibrated = calibrated_models(session, assignment_id) if models else set()
    return {run_id: GpuNote(model, model in calibrated) for run_id, model in models.items()}
