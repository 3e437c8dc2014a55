"""Where a run's GPU-stage time went, for staff: read by its assignment's plug-in from what its
stage recorded (worker.gpu_time; hw4's: rubrics/hw4/gpu_time.py), and the seconds of a grade that
were its timing, read from the run's turns on the GPU's lock where it was timed in a piece of its
own (the same record for every assignment), else by its plug-in.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from grader.models import Run
from worker.assignment import AssignmentError, Plugin, assignment_of
from worker.gpu_time import GpuTime, StoredMeasurements, as_dict, as_number
from worker.rubric import RubricError, load_rubric


def plugin_of(slug: str, search: Sequence[Path]) -> Plugin | None:
    """The plug-in of the assignment `slug`, None where its rubric no longer loads (a run's record
    outlives its rubric: the page shows the rest)."""
    try:
        return assignment_of(load_rubric(slug, search=search))
    except (RubricError, AssignmentError):
        return None


def timing_seconds(measurements: StoredMeasurements, plugin: Plugin | None) -> float | None:
    """The seconds of a run's grade that were its timing: what its timing piece held the GPU's lock
    alone (worker.gpu.gpu_lock `GpuTurns`, exactly its timing), else what its plug-in reads from
    its stage's record; None where neither says."""
    turns = lock_turns(measurements)
    if turns is not None and "alone" in turns:
        return turns["alone"]
    return None if plugin is None or plugin.timing_seconds is None else plugin.timing_seconds(measurements)


def lock_turns(measurements: StoredMeasurements) -> dict[str, float] | None:
    """The seconds a run's timing piece waited for and held the GPU's lock, shared and alone
    (worker.gpu.gpu_lock `GpuTurns.record`, the same in each of its problems); None for a run
    not timed in a piece of its own."""
    for m in measurements.values():
        turns = as_dict(as_dict(m.get("telemetry")).get("gpu_turns"))
        read = {kind: n for kind, v in turns.items() if (n := as_number(v)) is not None}
        if read:
            return read
    return None


def run_gpu_time(run: Run, plugin: Plugin | None) -> GpuTime | None:
    """The table of a run's stored results, as its plug-in reads them; None where it reads none."""
    if plugin is None or plugin.gpu_time is None:
        return None
    return plugin.gpu_time({r.problem_id: (r.details or {}).get("measurement") or {} for r in run.results})
