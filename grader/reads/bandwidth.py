"""Each profiled problem's achieved memory bandwidth, beside the GPU's peak and the reference's.

A stage that profiles a problem's kernels records a worker.measurements.Bandwidth in its
telemetry (the traffic the operation needs over the kernels' own GPU time). `grader
calibrate` keeps, per GPU model, the peak copy bandwidth measured there
(worker.gpu.copy_peak) and the calibration submissions' own figures per problem. The run
page and the API show the three side by side: the share of the peak tells a student how far a
memory-bound kernel is from what the GPU can do; a share above 100% cannot be a real kernel
(a mis-timed call, or less work than the operation needs) and is flagged for staff.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grader.models import GpuCalibration, Run
from grader.reads.gpu_info import run_gpu_models
from worker.measurements import BANDWIDTH_KEY, Bandwidth


@dataclass(frozen=True)
class ProblemBandwidth:
    problem_id: str
    measured: Bandwidth
    peak_gb_s: float | None  # the GPU model's measured peak copy bandwidth (its calibration)
    reference_gb_s: float | None  # the calibration submissions' median on this problem

    @property
    def percent_of_peak(self) -> float | None:
        return None if not self.peak_gb_s else 100.0 * self.measured.gb_s / self.peak_gb_s

    @property
    def above_peak(self) -> bool:
        return self.percent_of_peak is not None and self.percent_of_peak > 100.0


@dataclass(frozen=True)
class RunBandwidth:
    gpu_model: str | None
    calibrated: bool  # a calibration with a measured peak is stored for this model
    problems: list[ProblemBandwidth]


def _calibration(session: Session, assignment_id: int, model: str | None) -> dict[str, Any]:
    if not model:
        return {}
    row = session.scalar(select(GpuCalibration).where(GpuCalibration.assignment_id == assignment_id,
                                                     GpuCalibration.gpu_name == model))
    return (row.details or {}) if row is not None else {}


def _bandwidth(record: dict[str, Any]) -> Bandwidth | None:
    """A stored record read back, None where it cannot make a figure (malformed, or a kernel
    time that is not a positive number)."""
    try:
        stored = Bandwidth.from_dict(record)
    except (KeyError, TypeError, ValueError):
        return None
    return Bandwidth.of(stored.case, stored.shape, stored.bytes, stored.kernel_ms)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def run_bandwidth(session: Session, run: Run) -> RunBandwidth | None:
    """The run's profiled problems' bandwidth, None where no problem has one."""
    records = []
    for result in sorted(run.results, key=lambda r: r.problem_id):
        telemetry = ((result.details or {}).get("measurement") or {}).get("telemetry") or {}
        record = telemetry.get(BANDWIDTH_KEY)
        measured = _bandwidth(record) if isinstance(record, dict) else None
        if measured is not None:
            records.append((result.problem_id, measured))
    if not records:
        return None
    model = run_gpu_models(session, [run.id]).get(run.id)
    details = _calibration(session, run.submission.assignment_id, model)
    peak = _number((details.get("peak_copy") or {}).get("gb_s"))
    references = details.get("bandwidth") or {}
    return RunBandwidth(model, peak is not None, [ProblemBandwidth(pid, measured, peak, _number(references.get(pid)))
                                                   for pid, measured in records])
