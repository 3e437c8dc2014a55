"""hw4's reader of a run's GPU time per phase (rubrics/hw4/gpu_time.py, the plug-in's gpu_time and
timing_seconds), from measurement telemetry shaped as the stage records it (rubrics/hw4/kernels.py
`seconds`, rubrics/hw4/problem3.py `problem3`, grade.py `gpu_busy`, `load`, `budget`): each row's
figures and what the rows add up to; and the service's reading of the timing part
(grader/reads/gpu_phases.py), from the lock's turns first."""
from __future__ import annotations

from typing import Any

import pytest

from grader.reads.gpu_phases import lock_turns
from grader.reads.gpu_phases import timing_seconds as service_timing_seconds
from rubrics.hw4 import ASSIGNMENT as HW4
from rubrics.hw4.gpu_time import gpu_time, timing_seconds
from worker.assignment import Plugin

VECADD = Plugin(zip_folder="vecadd")  # a plug-in whose stage records no phases


def kernel(start: float, abi: float, binding: float, profile: float, warm: float, timing: float | None) -> dict[str, Any]:
    seconds = {"start": start, "abi_cases": abi, "kernel_profile": profile, "timing_warm": warm, "binding_cases": binding}
    if timing is not None:  # a problem whose public cases failed is not timed
        seconds["timing"] = timing
    return {"seconds": seconds, "gpu_busy": {"seconds": 60.0, "samples": 300, "busy_fraction": 0.4}}


SHARED = {"budget": {"budget_s": 300, "stage_s": 180.0},
          "load": {"minitorch": {"loaded": True, "seconds": 2.5, "why": None},
                   "minitorch/cuda_kernels/softmax_kernel.so": {"loaded": True, "seconds": 0.5, "why": None}}}
PROBLEM3 = {"setup_s": 12.0, "elapsed_s": 110.0,
            "timing": {"unfused_ms": [3000.0] * 10, "fused_ms": [2000.0] * 10, "timing_ended_s": 105.0}}


def record() -> dict[str, dict[str, Any]]:
    telemetry = {"1.1": kernel(1.0, 4.0, 3.0, 6.0, 2.0, 9.0), "1.2": kernel(1.0, 2.0, 2.0, 3.0, 2.0, 11.0),
                 "2.1": kernel(1.5, 1.0, 1.0, 2.0, 2.0, None), "2.2": kernel(1.5, 3.0, 3.0, 4.0, 2.0, 10.0),
                 "3": {"problem3": PROBLEM3, "gpu_busy": {"seconds": 110.0, "busy_fraction": 0.9}}}
    return {pid: {"status": "ok", "telemetry": {**t, **SHARED}} for pid, t in telemetry.items()}


def test_every_phase_and_what_the_stage_spent_on_it() -> None:
    table = gpu_time(record())
    assert table is not None and table.problems == ["1.1", "1.2", "2.1", "2.2", "3"]
    rows = {r.phase: r for r in table.rows}
    assert rows["child start"].seconds == {"1.1": 1.0, "1.2": 1.0, "2.1": 1.5, "2.2": 1.5}
    assert rows["child start"].run_s == 5.0  # one after another
    assert rows["checks through the C ABI"].seconds["1.1"] == 4.0 and rows["checks through the C ABI"].run_s is None
    assert rows["kernel profile"].run_s is None and rows["timing warm-up"].run_s is None
    assert rows["timing"].seconds == {"1.1": 9.0, "1.2": 11.0, "2.2": 10.0} and rows["timing"].run_s == 30.0
    # at once: the kernel problems' 60 s of wall time less their 5 s of starts and 30 s of timings
    assert rows["checks, profiles and warm-ups of all problems, at once"].run_s == 25.0
    assert rows["Problem 3 setup (building both models)"].run_s == 12.0
    assert rows["Problem 3 timed steps"].run_s == 50.0  # 20 steps of 3 s and 2 s
    assert rows["Problem 3 checked first steps, causality probe, timed pairs' inputs"].run_s == 43.0  # 105 - 12 - 50
    assert rows["Problem 3 verification of a timed step"].run_s == 5.0
    other = next(r for r in table.rows if r.phase.startswith("other"))
    assert other.run_s == 10.0  # 180 s in the stage less the kernel problems' 60 and Problem 3's 110
    assert sum(r.run_s for r in table.rows if r.run_s is not None) == pytest.approx(table.stage_s)
    assert [r.phase for r in table.rows][:2] == ["child start", "checks through the C ABI"]  # the order they run
    assert table.stage_s == 180.0 and table.budget_s == 300
    assert table.loads == {"minitorch": 2.5, "minitorch/cuda_kernels/softmax_kernel.so": 0.5}
    assert table.gpu_busy == {"kernel problems": 0.4, "3": 0.9}


def test_problem3_that_stopped_early_and_a_phase_not_known_yet() -> None:
    runs = record()
    runs["3"]["telemetry"]["problem3"] = {"elapsed_s": 300.0}  # its setup hung
    runs["1.1"]["telemetry"]["seconds"]["new_phase"] = 1.25
    table = gpu_time(runs)
    assert table is not None
    rows = {r.phase: r for r in table.rows}
    assert rows["Problem 3 setup (building both models)"].run_s == 300.0
    assert rows["new_phase"].seconds == {"1.1": 1.25} and rows["new_phase"].run_s is None
    runs["3"]["telemetry"]["problem3"] = {"setup_s": 20.0, "elapsed_s": 80.0, "timing": {}}  # crashed in its checks
    after_setup = {r.phase: r for r in gpu_time(runs).rows}  # type: ignore[union-attr]
    assert after_setup["Problem 3 checked steps and what followed"].run_s == 60.0


def test_no_table_without_a_recorded_phase() -> None:
    assert gpu_time({}) is None
    assert gpu_time({"1": {"status": "ok", "telemetry": {"before": {"name": "NVIDIA H200"}}}}) is None  # no phases
    assert gpu_time({"1": {"status": "ok"}, "2": {"telemetry": None}}) is None  # a built run, a stage of another kind


def test_the_sanitizer_sessions_are_a_row_of_their_own_after_the_rest() -> None:
    """A failed problem's compute-sanitizer session (rubrics/hw4/sanitize.py, after Problem 3)
    is its own row, taken out of "other and idle"; a run without one has no such row."""
    assert not any("sanitizer" in r.phase for r in gpu_time(record()).rows)  # type: ignore[union-attr]
    runs = record()
    runs["2.1"]["telemetry"]["sanitizer"] = {"tool": "memcheck", "seconds": 4.0, "findings": []}
    table = gpu_time(runs)
    assert table is not None
    row = table.rows[-2]
    assert row.phase == "compute-sanitizer on a failed case" and row.seconds == {"2.1": 4.0} and row.run_s == 4.0
    other = table.rows[-1]
    assert other.phase.startswith("other") and other.run_s == 6.0  # 10 s less the sanitizer's 4
    assert sum(r.run_s for r in table.rows if r.run_s is not None) == pytest.approx(table.stage_s)


def test_the_timing_part_of_a_run_for_the_capacity_model() -> None:
    """What a schedule that times apart from the checks takes out of the grade: the kernel
    problems' timings (2.1 was not timed) and Problem 3's timed steps with the verification
    that follows them; warm-ups and profiles stay with the checks."""
    runs = record()
    assert timing_seconds(runs) == pytest.approx(9.0 + 11.0 + 10.0 + 50.0 + 5.0)
    runs["3"]["telemetry"]["problem3"] = {"setup_s": 20.0, "elapsed_s": 80.0, "timing": {}}  # settled before timing
    assert timing_seconds(runs) == pytest.approx(30.0)
    assert timing_seconds({"3": {"telemetry": {"problem3": PROBLEM3}}}) == pytest.approx(55.0)
    assert timing_seconds({"1": {"status": "ok", "telemetry": {"before": {"name": "NVIDIA H200"}}}}) is None
    assert timing_seconds({}) is None
    assert HW4.timing_seconds is timing_seconds and HW4.gpu_time is gpu_time  # the plug-in's readers


def test_the_service_reads_a_timing_pieces_turns_first_then_the_plug_in() -> None:
    """A timing piece's record of its turns on the GPU's lock is its timing, whatever the phases
    say, for any assignment; without one the plug-in reads its own stage's phases, and an
    assignment whose plug-in reads none has no timing part."""
    runs = record()
    assert service_timing_seconds(runs, HW4) == pytest.approx(85.0) and lock_turns(runs) is None
    assert service_timing_seconds(runs, VECADD) is None and service_timing_seconds(runs, None) is None
    turns = {"waited_shared": 0.1, "shared": 30.0, "waited_alone": 12.0, "alone": 41.5}
    for problem in runs.values():
        problem["telemetry"]["gpu_turns"] = turns
    assert lock_turns(runs) == turns
    for plugin in (HW4, VECADD, None):
        assert service_timing_seconds(runs, plugin) == pytest.approx(41.5)
