"""hw4's reader of where a run's GPU-stage time went (worker.gpu_time; the plug-in's gpu_time and
timing_seconds), from what its stage records in each problem's measurement telemetry.

What is read: a problem's `seconds` (phase -> wall seconds on the parent's clock: the kernel
problems record child start, checks through each path, kernel profile, timing warm-up and timing,
rubrics/hw4/kernels.py), `gpu_busy` (the wall seconds and NVML busy share of a part of the stage:
the kernel problems share one, Problem 3 has its own), `load` (each part's load probe) and `budget`
(the whole stage's wall seconds and its budget), a failed problem's `sanitizer` (its
compute-sanitizer session's seconds), and Problem 3's own record, `problem3`
(rubrics/hw4/problem3.py: its setup's end, its timing's end and its whole time, and each timed
step's milliseconds). The kernel problems' checks, profiles and warm-ups run all at once, so
their rows are not added up: their part of the stage is the kernel problems' wall time less
their child starts and timings, which run one after another.
"""
from __future__ import annotations

from typing import Any

from worker.gpu_time import GpuTime, PhaseRow, StoredMeasurements, as_dict, as_number

# A kernel problem's phases (its telemetry's `seconds`), in the order they run, in words;
# whether each runs beside the others' (all problems at once) or one after another.
PHASE_WORDS = {
    "start": "child start",
    "abi_cases": "checks through the C ABI",
    "binding_cases": "checks through the binding",
    "kernel_profile": "kernel profile",
    "timing_warm": "timing warm-up",
    "timing": "timing",
}
ONE_AFTER_ANOTHER = ("start", "timing")
SANITIZER = "compute-sanitizer on a failed case"
KERNELS = "kernel problems"  # the part of the stage whose problems share one `gpu_busy`


def _kernel_rows(phases: dict[str, dict[str, float]], kernel_wall: float | None) -> list[PhaseRow]:
    keys = [k for k in PHASE_WORDS if any(k in p for p in phases.values())]
    keys += sorted({k for p in phases.values() for k in p} - set(keys))  # a phase this page does not know yet
    rows, beside, sequential = [], [], 0.0
    for key in keys:
        seconds = {pid: s[key] for pid, s in phases.items() if key in s}
        if key in ONE_AFTER_ANOTHER:
            sequential += sum(seconds.values())
            rows.append(PhaseRow(PHASE_WORDS[key], seconds, round(sum(seconds.values()), 1), "one after another"))
        else:
            beside.append(PhaseRow(PHASE_WORDS.get(key, key), seconds, None, "all problems at once"))
    at_once = None if kernel_wall is None else round(max(0.0, kernel_wall - sequential), 1)
    total = PhaseRow("checks, profiles and warm-ups of all problems, at once", {}, at_once,
                     "the kernel problems' wall time less their child starts and timings")
    return [*rows[:1], *beside, total, *rows[1:]] if beside else rows


def _problem3_timing(info: dict[str, Any]) -> tuple[float, int, float] | None:
    """Problem 3's timed steps: their seconds, how many, and when its timing ended (seconds
    into the problem); None when it ended before its timing did (or was never timed)."""
    timing = as_dict(info.get("timing"))
    ended = as_number(timing.get("timing_ended_s"))
    if ended is None:
        return None
    steps_ms = [v for key in ("unfused_ms", "fused_ms") for v in timing.get(key) or [] if as_number(v) is not None]
    return sum(steps_ms) / 1000, len(steps_ms), ended


def _problem3_rows(pid: str, info: dict[str, Any]) -> list[PhaseRow]:
    elapsed, setup = as_number(info.get("elapsed_s")), as_number(info.get("setup_s"))
    if elapsed is None:
        return []
    if setup is None:  # it ended during its setup
        return [PhaseRow("Problem 3 setup (building both models)", {pid: round(elapsed, 1)}, round(elapsed, 1))]
    rows = [PhaseRow("Problem 3 setup (building both models)", {pid: round(setup, 1)}, round(setup, 1))]
    timing = _problem3_timing(info)
    if timing is None:  # it ended before its timing did
        rows.append(PhaseRow("Problem 3 checked steps and what followed", {pid: round(elapsed - setup, 1)},
                             round(elapsed - setup, 1)))
        return rows
    timed, steps, ended = timing
    rest = max(0.0, ended - setup - timed)
    return [*rows,
            PhaseRow("Problem 3 checked first steps, causality probe, timed pairs' inputs", {pid: round(rest, 1)},
                     round(rest, 1)),
            PhaseRow("Problem 3 timed steps", {pid: round(timed, 1)}, round(timed, 1),
                     f"{steps} steps on the parent's clock"),
            PhaseRow("Problem 3 verification of a timed step", {pid: round(elapsed - ended, 1)},
                     round(elapsed - ended, 1))]


def _sanitizer_row(telemetry: dict[str, dict[str, Any]]) -> PhaseRow | None:
    """The compute-sanitizer's sessions on failed cases (rubrics/hw4/sanitize.py), one problem
    after another once everything that scores is done; None when none ran."""
    seconds = {pid: s for pid, t in telemetry.items()
               if (s := as_number(as_dict(t.get("sanitizer")).get("seconds"))) is not None and s > 0}
    if not seconds:
        return None
    return PhaseRow(SANITIZER, seconds, round(sum(seconds.values()), 1), "one after another, last")


def gpu_time(measurements: StoredMeasurements) -> GpuTime | None:
    """The table for a run's measurements (problem id -> its stored measurement), or None when
    none of them recorded where its time went (no GPU stage ran, or a stage that records none)."""
    telemetry = {pid: as_dict(m.get("telemetry")) for pid, m in measurements.items()}
    phases = {pid: {k: float(v) for k, v in t["seconds"].items() if as_number(v) is not None}
              for pid, t in telemetry.items() if isinstance(t.get("seconds"), dict)}
    problem3 = {pid: t["problem3"] for pid, t in telemetry.items() if isinstance(t.get("problem3"), dict)}
    if not phases and not problem3:
        return None
    busy: dict[str, dict[str, Any]] = {}
    for pid, t in telemetry.items():
        if isinstance(t.get("gpu_busy"), dict):
            busy[KERNELS if pid in phases else pid] = t["gpu_busy"]
    kernel_wall = as_number(busy.get(KERNELS, {}).get("seconds"))
    rows = _kernel_rows(phases, kernel_wall) if phases else []
    for pid, info in problem3.items():
        rows += _problem3_rows(pid, info)
    sanitized = _sanitizer_row(telemetry)
    rows += [sanitized] if sanitized else []
    first = next(iter(telemetry.values()))
    budget = as_dict(first.get("budget"))
    stage_s = as_number(budget.get("stage_s"))
    parts = [kernel_wall] + [as_number(b.get("seconds")) for part, b in busy.items() if part != KERNELS]
    parts += [sanitized.run_s] if sanitized else []
    if stage_s is not None and None not in parts:
        rows.append(PhaseRow("other and idle: starting the load probes, the side children and Problem 3's child; waits between phases", {},
                             round(max(0.0, stage_s - sum(p or 0.0 for p in parts)), 1),
                             "the stage's wall time less the rows above"))
    loads = as_dict(first.get("load"))
    return GpuTime(
        problems=[pid for pid in measurements if pid in phases or pid in problem3],
        rows=rows, stage_s=stage_s, budget_s=as_number(budget.get("budget_s")),
        loads={part: s for part, v in loads.items() if isinstance(v, dict) and (s := as_number(v.get("seconds"))) is not None},
        gpu_busy={part: f for part, b in busy.items() if (f := as_number(b.get("busy_fraction"))) is not None},
    )


def timing_seconds(measurements: StoredMeasurements) -> float | None:
    """The seconds of a run's GPU stage that were its timing, the part a schedule that runs
    timing apart from the checks (grader/capacity/split.py) takes out of the grade: the kernel
    problems' `timing` phases (run one after another, alone) and Problem 3's timed steps with the
    verification of one of them that follows (elapsed less the timing's end). The timing
    warm-ups and kernel profiles run beside the checks, so they stay with them. A problem not
    timed (a failed check) adds nothing; None when no problem recorded its phases. A run timed in
    its own piece is read from its turns on the GPU's lock instead (grader/reads/gpu_phases.py)."""
    telemetry = [as_dict(m.get("telemetry")) for m in measurements.values()]
    phases = [t["seconds"] for t in telemetry if isinstance(t.get("seconds"), dict)]
    problem3 = [t["problem3"] for t in telemetry if isinstance(t.get("problem3"), dict)]
    if not phases and not problem3:
        return None
    total = sum(s for p in phases if (s := as_number(p.get("timing"))) is not None)
    for info in problem3:
        timing, elapsed = _problem3_timing(info), as_number(info.get("elapsed_s"))
        if timing is not None:
            total += timing[0] + max(0.0, (elapsed or timing[2]) - timing[2])
    return total
