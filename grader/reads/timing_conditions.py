"""The conditions each timed problem of a run was measured under, for staff (the run page): the
GPU's SM clock, temperature and throttle reasons over its timing windows, the windows taken again
or kept under a flag (worker.gpu_conditions), and the fused op's fastest timed call beside the
GPU's copy peak the stage measured, with the impossible figure worker.scoring withholds speed
points for. Read from each measurement's telemetry; nothing recorded anew.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader.models import Run
from worker.measurements import CONDITIONS_KEY, COPY_PEAK_KEY, ProblemMeasurement, copy_peak_gb_s, timed_rates
from worker.scoring import impossible_figure


@dataclass(frozen=True)
class ProblemConditions:
    problem_id: str
    recorded: bool
    note: str | None  # why nothing was read (no NVML), where nothing was
    windows: int
    retaken: int
    kept: list[str]  # why windows were kept under a flag (the first few)
    kept_flagged: int
    sm_clock_mhz: list[int] | None  # [lowest, highest] over the windows
    temperature_c: list[int] | None
    reasons: list[str]  # every throttle reason seen (idle aside)
    hot_c: float | None
    fastest_gb_s: float | None  # the fused op's fastest timed call, per shape's median
    peak_gb_s: float | None  # the GPU's copy peak as the stage measured it
    peak_note: str | None  # why there is none
    impossible: str | None  # worker.scoring.impossible_figure's words

    @property
    def percent_of_peak(self) -> float | None:
        if self.fastest_gb_s is None or not self.peak_gb_s:
            return None
        return 100.0 * self.fastest_gb_s / self.peak_gb_s


def _pair(value: Any) -> list[int] | None:
    ok = isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)
    return value if ok else None


def _of(pid: str, telemetry: dict[str, Any]) -> ProblemConditions | None:
    record = telemetry.get(CONDITIONS_KEY)
    if not isinstance(record, dict):
        return None
    m = ProblemMeasurement(pid, telemetry=telemetry)
    rates = timed_rates(telemetry)
    peak = telemetry.get(COPY_PEAK_KEY)
    return ProblemConditions(
        problem_id=pid, recorded=record.get("recorded") is True, note=record.get("note"),
        windows=int(record.get("windows") or 0), retaken=int(record.get("retaken") or 0),
        kept=[str(k) for k in record.get("kept") or []], kept_flagged=int(record.get("kept_flagged") or 0),
        sm_clock_mhz=_pair(record.get("sm_clock_mhz")), temperature_c=_pair(record.get("temperature_c")),
        reasons=[str(r) for r in record.get("reasons") or []],
        hot_c=record.get("hot_c") if isinstance(record.get("hot_c"), int | float) else None,
        fastest_gb_s=max((r.gb_s for r in rates), default=None), peak_gb_s=copy_peak_gb_s(telemetry),
        peak_note=str(peak.get("error")) if isinstance(peak, dict) and peak.get("error") else None,
        impossible=impossible_figure(m),
    )


def timing_conditions(measurements: Mapping[str, dict[str, Any]]) -> list[ProblemConditions]:
    """Each timed problem's conditions (problem id -> its stored measurement), in the run's order;
    empty where no problem recorded any (not timed, or graded before they were recorded)."""
    found = (_of(pid, m.get("telemetry") or {}) for pid, m in measurements.items())
    return [c for c in found if c is not None]


def run_timing_conditions(run: Run) -> list[ProblemConditions]:
    """`timing_conditions` of a run's stored results."""
    return timing_conditions({r.problem_id: (r.details or {}).get("measurement") or {} for r in run.results})
