"""A grade in two pieces: what the checks piece leaves for the timing piece, and how the two
pieces' measurements of a problem become one (pure; worker.pipeline runs the pieces).

The checks piece measures every correctness case and marks each problem it would have timed
`timing_pending`; the timing piece measures only those problems' speed, later, with the GPU to
itself. A problem's final measurement is its checks' verdicts with the timing's figures, as
one whole grade would have measured them. A stage that checks and times in one child (hw4's
Problem 3: its first checked step is the timing's warm-up) checks again in the timing piece,
and that full measurement stands.
"""
from __future__ import annotations

from dataclasses import replace

from worker.measurements import ProblemMeasurement

TIMING_PENDING = "timing_pending"
RECHECKED = "rechecked"  # a measurement that holds its own checks beside its timing
# The toolchain record's list of the problems whose timing a run passed over (a newer upload counted).
PASSED_OVER = "timing_passed_over"
PENDING_WORDS = "speed is measured once the GPU is free; your correctness verdicts are final"
# What a timing piece records of itself (its own start, loads and budget): kept apart, under
# `timing_piece`, so the checks' record of the same names stays the one the page shows.
_PIECE_OWN = ("before", "seconds", "load", "budget", "gpu_busy", "gpu_before")


def mark_timing_pending(m: ProblemMeasurement) -> None:
    """The problem's checks passed what timing needs; its speed is measured in the timing piece."""
    m.telemetry[TIMING_PENDING] = True
    m.telemetry["timing_skipped"] = PENDING_WORDS


def pending_problems(measurements: list[ProblemMeasurement]) -> tuple[str, ...]:
    """The ids of the problems the checks piece left for the timing piece."""
    return tuple(m.problem_id for m in measurements if m.telemetry.get(TIMING_PENDING))


def settle_pending(measurements: list[ProblemMeasurement], why: str) -> list[ProblemMeasurement]:
    """The checks' measurements with every pending timing settled as not timed, saying `why`."""
    settled = []
    for m in measurements:
        if m.telemetry.get(TIMING_PENDING):
            m = replace(m, telemetry={k: v for k, v in m.telemetry.items() if k != TIMING_PENDING})
            m.telemetry["timing_skipped"] = why
        settled.append(m)
    return settled


def merge_timing(checked: list[ProblemMeasurement], timed: list[ProblemMeasurement]) -> list[ProblemMeasurement]:
    """Each problem as one whole grade would have measured it: the checks' measurement with the
    timing piece's figures, status and cases added; a timing that checked again (RECHECKED)
    is the problem's measurement whole. A pending problem the timing piece did not return
    stays not timed, saying so."""
    by_id = {m.problem_id: m for m in timed}
    merged = []
    for m in checked:
        t = by_id.get(m.problem_id)
        if not m.telemetry.get(TIMING_PENDING):
            merged.append(m)
        elif t is None:
            merged.extend(settle_pending([m], "the timing piece did not measure this problem"))
        elif t.telemetry.get(RECHECKED):
            merged.append(t)
        else:
            merged.append(_with_timing(m, t))
    return merged


def _with_timing(checks: ProblemMeasurement, timing: ProblemMeasurement) -> ProblemMeasurement:
    telemetry = {k: v for k, v in checks.telemetry.items() if k not in (TIMING_PENDING, "timing_skipped")}
    telemetry.update({k: v for k, v in timing.telemetry.items() if k not in _PIECE_OWN})
    telemetry["timing_piece"] = {k: timing.telemetry[k] for k in _PIECE_OWN if k in timing.telemetry}
    routes = {route: [*checks.cases_by(route), *timing.cases_by(route)] for route in {**checks.routes, **timing.routes}}
    merged = replace(checks, routes=routes, telemetry=telemetry, figures={**checks.figures, **timing.figures})
    if timing.status != "ok":  # the submission failed while timed: as a whole grade, the problem ends there
        merged.status, merged.log_tail = timing.status, timing.log_tail
    elif timing.log_tail and not checks.log_tail:
        merged.log_tail = timing.log_tail
    failed = merged.failed_cases
    merged.first_failure = failed[0] if failed else None
    return merged
