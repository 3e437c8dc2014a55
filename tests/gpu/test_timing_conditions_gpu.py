"""Timing that proves its conditions, on a GPU: the reference kit graded by the GPU stage, every
timed problem's windows read through NVML (a real SM clock, temperature and throttle reasons
beside each figure), the GPU's copy peak measured by the stage before its timings, and no kit
figure faster than that peak allows (worker.scoring.impossible_figure). Also what a reading
costs the parent, two per window.

Writes what it saw to $OUT/timing_conditions.json (or .gpu-out/).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rubrics.hw4.grade import GpuStageConfig, run_gpu_stage
from rubrics.hw4.problem3 import Problem3Config
from rubrics.hw4.speed import TimingConfig
from worker.gpu_conditions import NvmlReader
from worker.measurements import CONDITIONS_KEY, COPY_PEAK_KEY, ProblemMeasurement, copy_peak_gb_s, timed_rates
from worker.rubric import load_rubric
from worker.sandbox import SandboxLimits, SandboxPolicy
from worker.scoring import impossible_figure, score_run

pytestmark = pytest.mark.gpu

RUBRIC = load_rubric("hw4")
GiB = 1024**3
LIMITS = SandboxLimits(wall_s=600, cpu_s=1200, memory_bytes=48 * GiB, max_processes=512, file_size_bytes=4 * GiB)
POLICY = SandboxPolicy(user=os.environ.get("KG_SANDBOX_USER", "nobody") or None, isolate_network=True, gpu_index=0)
P3 = Problem3Config(budget_s=90, max_pairs=4)  # its windows, not its figure's width, are what is checked
OUT = Path(os.environ.get("OUT", ".gpu-out"))


@pytest.fixture()
def work() -> Iterator[Path]:
    """A work folder the sandbox user can reach (pytest's own tmp folders are 0700 root)."""
    root = Path(tempfile.mkdtemp(prefix="kg-gpu-conditions-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def windows_of(m: ProblemMeasurement) -> list[dict]:
    """Every kept window's record: the kernel problems' per shape, Problem 3's per pair."""
    if m.problem_id == "3":
        return list(m.telemetry["problem3"]["timing"]["windows"])
    return [w for shape in m.telemetry["timing_shapes"] for w in shape["windows"]]


def reading_cost_ms(reads: int = 200) -> dict[str, float]:
    reader, note = NvmlReader.open(POLICY.gpu_index or 0)
    assert reader is not None, note
    try:
        costs = []
        for _ in range(reads):
            started = time.perf_counter()
            reader.read()
            costs.append((time.perf_counter() - started) * 1e3)
        sample = reader.read()
    finally:
        reader.close()
    return {"median_ms": round(statistics.median(costs), 3), "max_ms": round(max(costs), 3),
            "sample": str(sample), "hot_c": reader.hot_c}


@pytest.mark.timeout(900)
def test_the_kits_windows_record_the_gpus_conditions_and_no_figure_passes_the_copy_peak(
    kit_root: Path, work: Path,
) -> None:
    config = GpuStageConfig(limits=LIMITS, policy=POLICY, timing=TimingConfig(), problem3=P3)
    started = time.monotonic()
    measurements = run_gpu_stage(RUBRIC, kit_root, kit_root, work, config)
    seconds = time.monotonic() - started
    score = score_run(RUBRIC, measurements)
    seen: dict[str, object] = {"stage_s": round(seconds, 1), "reading": reading_cost_ms()}
    for m in measurements:
        conditions = m.telemetry.get(CONDITIONS_KEY)
        rates = timed_rates(m.telemetry)
        seen[m.problem_id] = {"conditions": conditions, "copy_peak": m.telemetry.get(COPY_PEAK_KEY),
                              "fastest_gb_s": round(max((r.gb_s for r in rates), default=0.0), 1),
                              "flags": score.problem(m.problem_id).flags}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "timing_conditions.json").write_text(json.dumps(seen, indent=1, default=str))
    print(json.dumps(seen, indent=1, default=str))

    assert sorted(m.problem_id for m in measurements) == ["1.1", "1.2", "2.1", "2.2", "3"]
    for m in measurements:
        pid = m.problem_id
        assert m.status == "ok" and m.all_passed, (pid, m.first_failure, m.log_tail[-2000:])
        conditions = m.telemetry[CONDITIONS_KEY]
        assert conditions["recorded"] is True, (pid, conditions)
        low_mhz, high_mhz = conditions["sm_clock_mhz"]
        assert 0 < low_mhz <= high_mhz < 5000, (pid, conditions)
        low_c, high_c = conditions["temperature_c"]
        assert 0 < low_c <= high_c < 120, (pid, conditions)
        assert conditions["reasons_read"] is True and isinstance(conditions["reasons"], list), (pid, conditions)
        windows = windows_of(m)
        assert len(windows) == conditions["windows"] > 0, (pid, len(windows), conditions)
        assert all(w["sm_mhz"] > 0 and "temp_c" in w and isinstance(w["reasons"], list) for w in windows), (pid, windows)
        if pid != "3":
            peak = copy_peak_gb_s(m.telemetry)
            assert peak is not None and 100 < peak < 20000, (pid, m.telemetry.get(COPY_PEAK_KEY))
            rates = timed_rates(m.telemetry)
            assert len(rates) == len(m.telemetry["timing_shapes"]) and all(0 < r.gb_s < peak for r in rates), (pid, rates)
        assert impossible_figure(m) is None, pid
        assert not any("impossible timing" in f for f in score.problem(pid).flags), score.problem(pid).flags
    # two readings per window: a few per cent of a kernel trial at most
    assert seen["reading"]["median_ms"] < 5.0, seen["reading"]  # type: ignore[index]
