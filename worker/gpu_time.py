"""Where a run's GPU-stage time went, per phase and problem, for staff (the run page and the API's
run record): the table's types, which an assignment's plug-in fills from what its own stage
recorded in each problem's measurement telemetry (worker.assignment.Plugin.gpu_time), and the
seconds of a whole grade that were its timing (Plugin.timing_seconds, for the capacity model).
Both readers take a run's stored measurements, problem id -> measurement dict, as stored.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PhaseRow:
    phase: str  # in words
    seconds: dict[str, float]  # problem id -> its seconds in this phase
    run_s: float | None  # its share of the stage's wall time; None: beside other rows (see the next total)
    note: str = ""


@dataclass(frozen=True)
class GpuTime:
    problems: list[str]  # the table's columns, in the run's order
    rows: list[PhaseRow]
    stage_s: float | None  # the run's whole GPU stage, wall seconds
    budget_s: float | None
    loads: dict[str, float] = field(default_factory=dict)  # part -> seconds its load probe took
    gpu_busy: dict[str, float] = field(default_factory=dict)  # part of the stage -> NVML busy share


StoredMeasurements = Mapping[str, dict[str, Any]]
# A run's table, or None where its stage recorded none.
GpuTimeReader = Callable[[StoredMeasurements], GpuTime | None]
# The seconds of a run's whole grade that were its timing, or None where its stage recorded none.
TimingReader = Callable[[StoredMeasurements], float | None]


def as_dict(value: Any) -> dict[str, Any]:
    """`value` where it is a dict, else an empty one: stored telemetry is read as it comes."""
    return value if isinstance(value, dict) else {}


def as_number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
