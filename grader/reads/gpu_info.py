"""Which GPU model graded a run, and whether that model has a stored calibration.

The model is read from the GPU snapshot every stage records in a problem's measurement
telemetry (at worker.measurements.GPU_SNAPSHOT_KEYS), inside the JSON by the database. A model
without a GpuCalibration row for the assignment (`grader calibrate` was not run on it) is
scored against the rubric's course targets, which our own reference kit may not reach there
(docs/benchmarks/speedups.md): such grades deserve a second look.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from grader.models import GpuCalibration, ProblemResult
from worker.measurements import GPU_SNAPSHOT_KEYS


@dataclass(frozen=True)
class GpuNote:
    model: str
    calibrated: bool  # a calibration for this model is stored for the run's assignment


def gpu_name() -> ColumnElement[str]:
    """A problem result's GPU model, read from its telemetry by the database (NULL: none)."""
    return func.coalesce(*(ProblemResult.details[("measurement", "telemetry", key, "name")].as_string()
                           for key in GPU_SNAPSHOT_KEYS))


def run_gpu_models(session: Session, run_ids: Collection[int]) -> dict[int, str]:
    """run id -> the GPU model its measurements were taken on (runs without any: absent)."""
    if not run_ids:
        return {}
    rows = session.execute(
        select(ProblemResult.run_id, func.max(gpu_name())).where(ProblemResult.run_id.in_(list(run_ids)))
        .group_by(ProblemResult.run_id)
    )
    return {run_id: model for run_id, model in rows if model}


def calibrated_models(session: Session, assignment_id: int) -> set[str]:
    return set(session.scalars(select(GpuCalibration.gpu_name).where(GpuCalibration.assignment_id == assignment_id)))


def gpu_notes(session: Session, assignment_id: int, run_ids: Collection[int]) -> dict[int, GpuNote]:
    """run id -> its GPU model and whether that model is calibrated for `assignment_id`."""
    models = run_gpu_models(session, run_ids)
    calibrated = calibrated_models(session, assignment_id) if models else set()
    return {run_id: GpuNote(model, model in calibrated) for run_id, model in models.items()}
